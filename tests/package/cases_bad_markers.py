"""Markers the pytest plugin must refuse when it collects the tests (test_pytest_plugin.py):
before any test runs, one error naming each test and what is wrong."""
import pytest


@pytest.mark.limit_gpu_memory("12 XB")
def test_bad_unit():
    pass


@pytest.mark.limit_gpu_leaks("1 MiB", "2 MiB")
def test_two_sizes():
    pass


@pytest.mark.limit_gpu_growth_per_step(-1)
def test_negative():
    pass


@pytest.mark.limit_gpu_memory("1 GiB")
def test_good():
    pass
