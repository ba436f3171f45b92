"""Pure-data fabric models (ZCube, ROFT): build, route, validate, cost and load — no root needed."""

from .model import Fabric, Link, Node, Port
from .spec import build_fabric, parse_spec

__all__ = ["Fabric", "Link", "Node", "Port", "build_fabric", "parse_spec"]
