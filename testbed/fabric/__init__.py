"""Pure-data fabric models (ZCube, ROFT): build, route, validate, cost and load — no root needed."""

from .kinds import build_fabric, parse_spec
from .model import Fabric, Link, Node, Port

__all__ = ["Fabric", "Link", "Node", "Port", "build_fabric", "parse_spec"]
