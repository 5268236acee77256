"""torch.cuda.graphs of the fake torch: a CUDAGraph whose capture changes nothing in the fake
allocator (PyTorch's would serve the capture from a private pool); what cumemtrace wraps."""


class CUDAGraph:
    def capture_begin(self, pool=None, capture_error_mode="global"):
        self.capturing = True

    def capture_end(self):
        self.capturing = False
