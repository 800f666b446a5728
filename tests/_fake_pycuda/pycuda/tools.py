from . import driver


class _Allocation:
    def __init__(self, address, nbytes):
        self.address, self.nbytes = address, nbytes

    def __int__(self):
        return self.address

    __index__ = __int__


class DeviceMemoryPool:
    def __init__(self):
        self.active_blocks = 0
        self.held_blocks = 0

    def allocate(self, nbytes):
        self.active_blocks += 1
        return _Allocation(driver._alloc(nbytes), nbytes)
