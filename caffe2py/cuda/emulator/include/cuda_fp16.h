// caffe2py CUDA emulator: the emulated device surface lives in c2emu.h.
#pragma once
#include "c2emu.h"
