#include <jaxport/jaxport.h>

#include <vector>

// Scores rows of 16 features: any number of rows up to the model's largest batch size, from
// any thread. A request the model refuses throws jaxport::InvalidInputError (naming the
// input); a runtime check that fires, jaxport::CheckFailedError (JAX's message, the status
// the jaxport server would answer in code()).
inline std::vector<float> Score(const jaxport::Model& model, const std::vector<float>& features) {
  const auto rows = static_cast<int64_t>(features.size() / 16);
  jaxport::Outputs out = model.Run({{"x", jaxport::TensorView(features.data(), {rows, 16})}});
  const jaxport::Tensor& probs = out.at("probs");
  return {probs.values<float>(), probs.values<float>() + probs.num_elements()};
}
