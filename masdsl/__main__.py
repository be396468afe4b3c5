"""`python -m masdsl ...`: the same CLI as the `masdsl` command."""

import sys

from masdsl.cli import program

if __name__ == "__main__":
    sys.exit(program())
