"""transformers' Trainer on a tiny GPT-2 (CPU), with no cumemtrace code in it, run under
`cumemtrace run` on the fake driver by test_traced_trainer.py: transformers' own layer (Conv1D)
allocates 64 KiB of device memory per call through device_ops.py, as a library op would. The
user's only line is trainer.train(); the sites must be the model file's lines."""
import sys
import tempfile

import torch
import transformers
from transformers.pytorch_utils import Conv1D

import device_ops

device_ops.init()
Conv1D.forward = device_ops.allocating(Conv1D.forward, 64 << 10)
torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16,
                                 bos_token_id=0, eos_token_id=0)
model = transformers.GPT2LMHeadModel(config)
ids = torch.randint(0, 64, (8, 8))
data = [{"input_ids": r, "labels": r} for r in ids]
with tempfile.TemporaryDirectory() as out:
    args = transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=2,
        report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()  # LINE trainer-train
sys.exit(0)
