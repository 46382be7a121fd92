"""The frozen build's entry point: the `cairn` command."""

import sys

from app.entry import main

if __name__ == "__main__":
    sys.exit(main())
