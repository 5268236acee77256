"""python -m cumemtrace ...: the same command line as `cumemtrace`."""
import sys

from ._cli import main

sys.exit(main())
