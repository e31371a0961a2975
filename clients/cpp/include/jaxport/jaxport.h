// jaxport's C++ library: run a jaxport artifact (docs/artifact-format.md) through a PJRT
// plugin, with no Python (docs/cpp.md). One include for everything:
//
//   error.h     jaxport::Error and its kinds (status code + one-line message)
//   tensor.h    DType, TensorView (caller's memory), Tensor (owned)
//   manifest.h  the manifest as structs, ParseManifest / LoadManifest
//   artifact.h  the path rule, sha256, zarr3 parameters
//   npy.h       .npy read/write
//   checks.h    check results -> JAX's message (what Model::Run raises)
//   model.h     Runtime (a PJRT plugin) and Model (an opened artifact): Run
#ifndef JAXPORT_JAXPORT_H_
#define JAXPORT_JAXPORT_H_

#include "jaxport/artifact.h"
#include "jaxport/checks.h"
#include "jaxport/error.h"
#include "jaxport/manifest.h"
#include "jaxport/model.h"
#include "jaxport/npy.h"
#include "jaxport/tensor.h"

#endif  // JAXPORT_JAXPORT_H_
