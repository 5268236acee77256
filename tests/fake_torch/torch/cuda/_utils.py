"""torch.cuda._utils of the fake torch: the one device."""


def _get_device_index(device, optional=False, allow_cpu=False):
    return 0 if device is None else int(device)
