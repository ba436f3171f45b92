"""One module per `zlab` command: `register(subparsers)` declares its flags beside `run(args)`,
which reads them. testbed/cli/__init__.py lists the modules in COMMANDS."""
