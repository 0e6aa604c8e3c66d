"""``dpbandit schema``: the JSON Schema of a message of the service's topics."""

from __future__ import annotations

import sys

from ..errors import ConfigError

__all__ = ["run"]


def run(args) -> int:
    from ..stream.json_schemas import MESSAGES, schema_text, write_schemas

    if args.write:
        paths = write_schemas(args.write)
        print(f"wrote {len(paths)} schemas to {args.write}", file=sys.stderr)
        return 0
    if args.name is None:
        width = max(map(len, MESSAGES))
        for name, msg in MESSAGES.items():
            way = "read from" if msg.direction == "in" else "written to"
            print(f"{name:<{width}}  {way} topics.{msg.topic}: {msg.model.__name__}")
        return 0
    if args.name not in MESSAGES:
        raise ConfigError(f"unknown message {args.name!r}; choose from {', '.join(MESSAGES)}")
    sys.stdout.write(schema_text(args.name))
    return 0
