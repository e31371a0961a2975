// The files of an artifact directory (docs/artifact-format.md): the path rule, sha256 (OpenSSL
// libcrypto), every listed file checked, parameters read from their zarr v3 arrays (regular
// chunk grid, one `bytes` codec, little-endian; chunks assembled into one dense row-major
// array and checked against the argument's sha256).
//
// The rules follow jaxport's Python consumer (clients/python/artifact: paths.py, manifest.py,
// weights.py): paths relative and inside the artifact, every file checked before it is used.
#ifndef JAXPORT_ARTIFACT_H_
#define JAXPORT_ARTIFACT_H_

#include <string>

#include "jaxport/manifest.h"
#include "jaxport/tensor.h"

namespace jaxport {

// The path rule's textual half: `rel` relative, '/'-separated, no "..", no backslash or NUL.
// `what` names the field for the error.
void CheckRelative(const std::string& rel, const std::string& what);

// <dir>/<rel> after the path rule, with the resolved path (symlinks followed) inside `dir`.
std::string ResolveInside(const std::string& dir, const std::string& rel, const std::string& what);

// The bytes of a file; ArtifactError naming `path` when it cannot be read.
std::string ReadFile(const std::string& path);

// Lowercase hex sha256.
std::string Sha256Hex(const void* data, size_t size);

// A file the manifest's `files` list names, read and checked against its size and sha256.
std::string ReadListedFile(const std::string& dir, const Manifest& manifest, const std::string& rel);

// Checks every listed file's size and sha256, and that every file a program or golden case
// uses is listed. Throws ArtifactError naming the file.
void VerifyFiles(const std::string& dir, const Manifest& manifest);

// One parameter read from its zarr3 array (shape and dtype checked against the manifest) and
// checked against the argument's sha256. Throws ArtifactError naming the parameter.
Tensor ReadParameter(const std::string& dir, const Argument& argument);

}  // namespace jaxport

#endif  // JAXPORT_ARTIFACT_H_
