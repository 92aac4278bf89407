// The C interface between the host emulation and a host-compiled module.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_HEADER_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_HEADER_H_

// Written once: compiled here, and pasted as text into the emulation header
// (HostEmulationHeader(), host_emulation_header.cc) modules are built against.
#define SJ_EMULATION_ABI                                                 \
  struct sj_thread_ctx {                                                 \
    unsigned thread, block, block_dim, grid_dim;                         \
  };                                                                     \
  struct sj_host_math {                                                  \
    float (*expf)(float), (*logf)(float);                                \
    float (*tanhf)(float), (*erff)(float);                               \
    double (*exp)(double), (*log)(double), (*tanh)(double);              \
  };                                                                     \
  struct sj_host_api {                                                   \
    void* team;                                                          \
    void (*sync_block)(void* team);                                      \
    unsigned long long (*exchange)(void* team, unsigned long long value, \
                                   int src_lane);                        \
    const sj_host_math* math;                                            \
  };                                                                     \
  struct sj_kernel_desc {                                                \
    unsigned long long arg_bytes, arg_align;                             \
    void (*pack)(void* const* args, void* out);                          \
    void (*run)(const void* packed, const sj_thread_ctx* thread,         \
                const sj_host_api* api);                                 \
  };

namespace stepjit::codegen::cuda::abi {
SJ_EMULATION_ABI
}  // namespace stepjit::codegen::cuda::abi

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_HOST_EMULATION_HEADER_H_
