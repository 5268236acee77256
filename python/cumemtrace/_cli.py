"""The `cumemtrace` console script and `python -m cumemtrace`: replaces this Python process with
the real executable, so that arguments, exit status, signals and the terminal are the CLI's own."""
import os
import sys

from ._paths import executable


def main():
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"cumemtrace: {exe} is missing or not executable; reinstall the package\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["cumemtrace"] + sys.argv[1:])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
