#!/bin/sh
# torch_venv_pytest.sh VENV_DIR TEST_DIR: pytest of TEST_DIR by the real-PyTorch venv's Python
# (scripts/setup.sh makes it; CUMEMTRACE_TORCH_VENV names another). A venv that cannot import
# torch and pytest is a missing prerequisite: exit 77 (CTest's Skipped) with the reason; CI's
# machine has it, so there nothing is skipped.
venv=$1
if ! "$venv/bin/python" -c 'import torch, pytest' >/dev/null 2>&1; then
  echo "no usable PyTorch venv at $venv (scripts/setup.sh makes it;" \
       "CUMEMTRACE_TORCH_VENV names another): skipped" >&2
  exit 77
fi
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider -p ctest_skips "$2"
