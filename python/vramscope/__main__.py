"""`vramscope ...` / `python -m vramscope ...`.

`run` executes a script under the recorder, which must happen in this
Python process, and `mcp` serves the MCP SDK's protocol from it; every
other command is the Rust command line, the same implementation as the
standalone binary."""

from __future__ import annotations

import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "run":
        from .run import main as run_main

        return run_main(args[1:])
    if args and args[0] == "mcp":
        from .mcp import main as mcp_main

        return mcp_main(args[1:])
    from . import _native

    sys.stdout.flush()
    return _native.cli(args)


if __name__ == "__main__":
    sys.exit(main())
