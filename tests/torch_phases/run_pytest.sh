#!/bin/sh
# run_pytest.sh VENV_DIR TEST_DIR: pytest of TEST_DIR by the venv's Python; a venv that cannot
# import torch and pytest fails (exit 1) with the reason, it does not skip.
venv=$1
if ! "$venv/bin/python" -c 'import torch, pytest' >/dev/null 2>&1; then
  echo "torch_phases: no usable PyTorch venv at $venv (scripts/setup.sh makes it;" \
       "CUMEMTRACE_TORCH_VENV names another)" >&2
  exit 1
fi
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$2"
