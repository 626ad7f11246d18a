// Stand-in for the CUDA header of the same name when kernels/fused.cu is built for the CPU emulation.
#pragma once
#include "../cuda_emu.h"
