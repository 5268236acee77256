"""The fake torch's module call (not an API of PyTorch): a Module whose calls run through a
`_wrapped_call_impl` whose first local is `self`, as torch.nn.Module's do, in a file under
torch/ (library code to the site rule, as torch/nn/modules/module.py is)."""


class Module:
    def _wrapped_call_impl(self, *args):
        return self.forward(*args)

    __call__ = _wrapped_call_impl
