"""Tests for test_pytest_plugin.py's no-CUDA case (issue 57): a process that never uses CUDA
(a training loop fallen back to the CPU) gives its tests nothing to judge. A test with a marker
fails as not judged, whatever its size; one without a marker passes unmeasured."""
import pytest


@pytest.mark.limit_gpu_leaks("0 B")
@pytest.mark.limit_gpu_memory("1 GiB")
def test_marked_on_the_cpu():
    assert sum(range(10)) == 45


def test_unmarked_on_the_cpu():
    assert sum(range(10)) == 45
