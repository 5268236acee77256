"""Where the native parts live: the package carries the same tree as the release tarball
(bin/cumemtrace, lib/libcumemtrace.so), so the CLI finds the preload as ../lib, as it does in an
installed tree."""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def executable():
    """Path of the cumemtrace executable inside the package."""
    return os.path.join(_HERE, "bin", "cumemtrace")


def preload_library():
    """Path of libcumemtrace.so inside the package."""
    return os.path.join(_HERE, "lib", "libcumemtrace.so")
