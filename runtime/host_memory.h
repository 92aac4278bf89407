// This machine's physical memory, for refusing input-sized allocations
// (a checkpoint's tensors, a dataset, a model) that cannot fit, before
// making them. Header-only: the fuzz targets compile single readers.
#ifndef STEPJIT_RUNTIME_HOST_MEMORY_H_
#define STEPJIT_RUNTIME_HOST_MEMORY_H_

#include <unistd.h>

namespace stepjit {

// Bytes of physical memory, or 0 when the system does not say.
inline double PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0
             ? static_cast<double>(pages) * static_cast<double>(page)
             : 0;
}

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_HOST_MEMORY_H_
