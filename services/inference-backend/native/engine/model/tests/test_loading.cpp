// Loading real and broken model directories written by the test itself: every bad input
// must end in a ModelError whose code and message name the problem.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "check.h"
#include "model_files.h"
#include "strata/cpu_backend.h"
#include "strata/float_convert.h"
#include "strata/model_config.h"
#include "strata/model_error.h"
#include "strata/model_weights.h"
#include "strata/safetensors.h"

using namespace strata;
using strata_test::RawTensor;
using strata_test::TempDir;

namespace {

const char* kTinyConfig = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16,
  "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "bos_token_id": 1,
  "eos_token_id": 2})";

std::vector<float> tensor_values(const ExpectedTensor& t) {
  size_t count = 1;
  for (int64_t d : t.shape) count *= static_cast<size_t>(d);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = 0.1f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(t.name.size()));
  return values;
}

// Every tensor of the tiny config, in `dtype`; `edit` may change or drop (empty name) each.
std::vector<RawTensor> tiny_tensors(const std::function<void(RawTensor&)>& edit = {}) {
  ModelConfig config = parse_model_config(kTinyConfig, "config.json");
  std::vector<RawTensor> out;
  for (const ExpectedTensor& t : expected_tensors(config)) {
    RawTensor raw{t.name, "F32", t.shape, strata_test::encode(tensor_values(t), "F32")};
    if (edit) edit(raw);
    if (!raw.name.empty()) out.push_back(std::move(raw));
  }
  return out;
}

void write_model(const std::filesystem::path& dir, const std::vector<RawTensor>& tensors, const std::string& config = kTinyConfig) {
  strata_test::write_file(dir / "config.json", config);
  strata_test::write_safetensors(dir / "model.safetensors", tensors);
}

ModelWeights load(const std::filesystem::path& dir) { return load_model_weights(dir, load_model_config(dir)); }

// Runs `fn`, expecting a ModelError with `code` whose message holds every one of `parts`.
bool fails_with(const std::function<void()>& fn, const std::string& code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const ModelError& e) {
    bool ok = e.code() == code;
    if (!ok) std::printf("  code %s, expected %s (%s)\n", e.code().c_str(), code.c_str(), e.what());
    for (const std::string& part : parts) {
      if (std::string(e.what()).find(part) == std::string::npos) {
        std::printf("  message \"%s\" lacks \"%s\"\n", e.what(), part.c_str());
        ok = false;
      }
    }
    return ok;
  } catch (const std::exception& e) {
    std::printf("  not a ModelError: %s\n", e.what());
    return false;
  }
  std::printf("  no error thrown\n");
  return false;
}

const char* kWeightsCode = "STRATA_MODEL_WEIGHTS";
const char* kConfigCode = "STRATA_MODEL_CONFIG";

}  // namespace

TEST_CASE("loading: f16 and bf16 decode exactly") {
  CHECK_EQ(f16_to_f32(0x3C00), 1.0f);
  CHECK_EQ(f16_to_f32(0xC000), -2.0f);
  CHECK_EQ(f16_to_f32(0x7BFF), 65504.0f);
  CHECK_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  CHECK(std::isinf(f16_to_f32(0x7C00)) && std::isnan(f16_to_f32(0x7E00)));
  CHECK_EQ(bf16_to_f32(0x3F80), 1.0f);
  CHECK_EQ(bf16_to_f32(0xC2F7), -123.5f);
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every f16 round-trips through f32
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f) && f32_to_f16(f) != h) ++mismatches;
    if (!std::isnan(bf16_to_f32(static_cast<uint16_t>(h))) && f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h))) != h) ++mismatches;
  }
  CHECK_EQ(mismatches, 0);
  CHECK_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), uint16_t{0x3C00});  // ties to even
  CHECK_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), uint16_t{0x3F80});
}

TEST_CASE("loading: a well-formed f32 model loads value for value") {
  TempDir dir("ok");
  write_model(dir.path(), tiny_tensors());
  ModelWeights w = load(dir.path());
  CHECK_EQ(w.layers.size(), size_t{2});
  CHECK_EQ(w.layers[1].k_proj.size(), size_t{8 * 16});
  ExpectedTensor k{"model.layers.1.self_attn.k_proj.weight", {8, 16}};
  CHECK(w.layers[1].k_proj == tensor_values(k));
  CHECK_EQ(w.lm_head.size(), size_t{32 * 16});
}

TEST_CASE("loading: missing directory, config or weights") {
  TempDir dir("missing");
  CHECK(fails_with([&] { load(dir.path() / "nope"); }, kConfigCode, {"config.json", "file not found"}));
  strata_test::write_file(dir.path() / "config.json", kTinyConfig);
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"model.safetensors", "not found"}));
  CHECK(fails_with([&] { CpuBackend backend(dir.path()); }, kWeightsCode, {"model.safetensors"}));
}

TEST_CASE("loading: truncated safetensors names the tensor and the file") {
  TempDir dir("truncated");
  std::string bytes = strata_test::safetensors_bytes(tiny_tensors());
  strata_test::write_file(dir.path() / "config.json", kTinyConfig);
  strata_test::write_file(dir.path() / "model.safetensors", bytes.substr(0, bytes.size() - 100));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"truncated", "lm_head.weight", "model.safetensors"}));
  CHECK(fails_with([&] { CpuBackend backend(dir.path()); }, kWeightsCode, {"truncated"}));

  strata_test::write_file(dir.path() / "model.safetensors", bytes.substr(0, 200));  // inside the header
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"truncated", "header"}));
  strata_test::write_file(dir.path() / "model.safetensors", bytes.substr(0, 5));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"too small"}));
  strata_test::write_file(dir.path() / "model.safetensors", "");
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"too small"}));
}

TEST_CASE("loading: wrong shape") {
  TempDir dir("shape");
  write_model(dir.path(), tiny_tensors([](RawTensor& t) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {16, 8};
  }));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode,
                   {"model.layers.0.self_attn.k_proj.weight", "shape [16, 8]", "expected [8, 16]"}));
}

TEST_CASE("loading: unsupported dtype") {
  TempDir dir("dtype");
  write_model(dir.path(), tiny_tensors([](RawTensor& t) {
    if (t.name == "model.norm.weight") t.dtype = "I32";
  }));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"model.norm.weight", "I32", "F32, F16, BF16"}));
}

TEST_CASE("loading: data_offsets that disagree with the shape") {
  TempDir dir("offsets");
  write_model(dir.path(), tiny_tensors([](RawTensor& t) {
    if (t.name == "model.norm.weight") t.bytes.resize(t.bytes.size() / 2);
  }));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"model.norm.weight", "data_offsets span 32 bytes", "needs 64"}));
}

TEST_CASE("loading: unknown architecture and malformed JSON") {
  TempDir dir("config");
  std::string bert = kTinyConfig;
  bert.replace(bert.find("LlamaForCausalLM"), 16, "BertModel");
  write_model(dir.path(), tiny_tensors(), bert);
  CHECK(fails_with([&] { load(dir.path()); }, "STRATA_UNKNOWN_ARCHITECTURE", {"BertModel", "config.json"}));
  CHECK(fails_with([&] { CpuBackend backend(dir.path()); }, "STRATA_UNKNOWN_ARCHITECTURE", {"BertModel"}));

  write_model(dir.path(), tiny_tensors(), std::string(kTinyConfig) + "}");
  CHECK(fails_with([&] { load(dir.path()); }, kConfigCode, {"config.json", "malformed JSON", "at byte"}));

  write_model(dir.path(), tiny_tensors());
  std::string bytes = strata_test::safetensors_bytes(tiny_tensors());
  bytes[8] = '[';  // the header's opening brace
  strata_test::write_file(dir.path() / "model.safetensors", bytes);
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"malformed header", "at byte"}));
}

TEST_CASE("loading: missing tensors and harmful extras fail, harmless extras are ignored") {
  TempDir dir("extra");
  write_model(dir.path(), tiny_tensors([](RawTensor& t) {
    if (t.name == "model.layers.1.mlp.up_proj.weight") t.name.clear();
  }));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"missing tensor \"model.layers.1.mlp.up_proj.weight\"", "[24, 16]"}));

  std::vector<RawTensor> with_bias = tiny_tensors();
  with_bias.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {16}, strata_test::encode(std::vector<float>(16, 1.0f), "F32")});
  write_model(dir.path(), with_bias);
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"model.layers.0.self_attn.q_proj.bias", "not part of the model"}));

  std::vector<RawTensor> harmless = tiny_tensors();
  harmless.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}, strata_test::encode({1.0f, 0.5f}, "F32")});
  harmless.push_back({"value_head.weight", "I64", {1}, std::string(8, '\0')});
  write_model(dir.path(), harmless);
  CHECK_EQ(load(dir.path()).layers.size(), size_t{2});
  // The load's progress counts every tensor's bytes, the ignored ones included: done == total.
  int64_t progress[2] = {-1, -1};
  load_model_weights(dir.path(), load_model_config(dir.path()), LoadProgress(progress));
  CHECK(progress[1] > 0 && progress[0] == progress[1]);
}

TEST_CASE("loading: a tied checkpoint that stores both tables counts both in the load's progress") {
  TempDir dir("tied-both");
  std::string tied = kTinyConfig;
  tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
  write_model(dir.path(), tiny_tensors(), tied);
  int64_t progress[2] = {-1, -1};
  const ModelWeights w = load_model_weights(dir.path(), load_model_config(dir.path()), LoadProgress(progress));
  CHECK(w.lm_head.empty());  // the copy is not read
  CHECK(progress[1] > 0 && progress[0] == progress[1]);
}

TEST_CASE("loading: tied embeddings from either table") {
  TempDir dir("tied");
  std::string tied = kTinyConfig;
  tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
  ExpectedTensor head{"lm_head.weight", {32, 16}}, embed{"model.embed_tokens.weight", {32, 16}};

  write_model(dir.path(), tiny_tensors([](RawTensor& t) { if (t.name == "model.embed_tokens.weight") t.name.clear(); }), tied);
  ModelWeights only_head = load(dir.path());  // the tinystories-656k layout
  CHECK(only_head.embed_tokens == tensor_values(head));
  CHECK(only_head.lm_head.empty());
  CHECK(&only_head.output_projection() == &only_head.embed_tokens);

  write_model(dir.path(), tiny_tensors([](RawTensor& t) { if (t.name == "lm_head.weight") t.name.clear(); }), tied);
  CHECK(load(dir.path()).embed_tokens == tensor_values(embed));

  write_model(dir.path(), tiny_tensors([](RawTensor& t) { if (t.name == "lm_head.weight") t.name.clear(); }));
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"missing tensor \"lm_head.weight\""}));
}

TEST_CASE("loading: the CPU backend packs a checkpoint's matrices from its mapping as it would their copies") {
  // The backend packs each matrix into its panels straight from the safetensors mapping, keeping
  // a bf16/f16 checkpoint's values as they are (the GEMM widens them exactly; an untied table's
  // rows too, on gather), and reads a tied table's token rows back from those panels; from
  // load_model_weights' fp32 copies it packs the widened values into fp32 panels. So the logits
  // must agree to the bit, in every dtype, tied or not, and the load's progress must end at the
  // checkpoint's bytes.
  std::string tied = kTinyConfig;
  tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
  const std::vector<int32_t> prompt = {1, 5, 9, 30, 7, 2, 31}, table = {0};
  const auto logits_of = [&](CpuBackend& backend) {
    backend.allocate_kv(1, 16);
    StepBatch batch;
    batch.seqs.push_back({prompt.data(), static_cast<int32_t>(prompt.size()), 0, table.data(), 1, true});
    std::vector<float> logits(static_cast<size_t>(backend.config().vocab_size), NAN);
    backend.forward(batch, logits.data());
    return logits;
  };
  for (const std::string dtype : {"F32", "BF16", "F16"}) {
    for (const std::string drop : {"", "lm_head.weight", "model.embed_tokens.weight"}) {  // untied; tied, either table
      TempDir dir("mapped");
      write_model(dir.path(), tiny_tensors([&](RawTensor& t) {
                    if (t.name == drop) t.name.clear();
                    std::vector<float> values(t.bytes.size() / 4);
                    std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
                    t.dtype = dtype;
                    t.bytes = strata_test::encode(values, dtype);
                  }),
                  drop.empty() ? kTinyConfig : tied);
      int64_t progress[2] = {-1, -1};
      CpuBackend mapped(dir.path(), {1, CpuKvDtype::kAuto, LoadProgress(progress)});
      CHECK(progress[1] > 0 && progress[0] == progress[1]);
      const ModelConfig config = load_model_config(dir.path());
      CpuBackend copied(config, load_model_weights(dir.path(), config), {1});
      CHECK(mapped.weights_format() == (dtype == "F32" ? "float32" : dtype == "BF16" ? "bfloat16" : "float16"));
      CHECK(copied.weights_format() == "float32");
      const std::vector<float> a = logits_of(mapped), b = logits_of(copied);
      bool finite = true;
      for (float v : a) finite = finite && std::isfinite(v);
      CHECK(finite);
      if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) std::printf("  %s, without %s: logits differ\n", dtype.c_str(), drop.c_str());
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
  // A tied table's token rows, read back from the output projection's panels, are the rows an
  // untied copy of the same table reads from its own row-major table.
  TempDir tied_dir("tied"), untied_dir("untied");
  std::string embed_bytes;
  for (const RawTensor& t : tiny_tensors())
    if (t.name == "model.embed_tokens.weight") embed_bytes = t.bytes;
  write_model(tied_dir.path(), tiny_tensors([](RawTensor& t) { if (t.name == "lm_head.weight") t.name.clear(); }), tied);
  write_model(untied_dir.path(), tiny_tensors([&](RawTensor& t) { if (t.name == "lm_head.weight") t.bytes = embed_bytes; }));
  CpuBackend tied_backend(tied_dir.path(), {1}), untied_backend(untied_dir.path(), {1});
  const std::vector<float> a = logits_of(tied_backend), b = logits_of(untied_backend);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("loading: sharded checkpoints") {
  TempDir dir("sharded");
  std::vector<RawTensor> all = tiny_tensors(), first(all.begin(), all.begin() + 7), second(all.begin() + 7, all.end());
  strata_test::write_file(dir.path() / "config.json", kTinyConfig);
  strata_test::write_safetensors(dir.path() / "model-00001-of-00002.safetensors", first);
  strata_test::write_safetensors(dir.path() / "model-00002-of-00002.safetensors", second);
  std::string index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (size_t i = 0; i < all.size(); ++i) {
    index += (i ? ", \"" : "\"") + all[i].name + "\": \"model-0000" + (i < 7 ? "1" : "2") + "-of-00002.safetensors\"";
  }
  strata_test::write_file(dir.path() / "model.safetensors.index.json", index + "}}");
  ModelWeights sharded = load(dir.path());

  TempDir single("single");
  write_model(single.path(), all);
  ModelWeights reference = load(single.path());
  CHECK(sharded.embed_tokens == reference.embed_tokens);
  CHECK(sharded.layers[1].down_proj == reference.layers[1].down_proj);
  CHECK(sharded.lm_head == reference.lm_head);

  std::filesystem::remove(dir.path() / "model-00002-of-00002.safetensors");
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"model-00002-of-00002.safetensors", "file not found"}));
  strata_test::write_file(dir.path() / "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../../etc/passwd\"}}");
  CHECK(fails_with([&] { load(dir.path()); }, kWeightsCode, {"not a file beside the index"}));
}

TEST_CASE("loading: f16 and bf16 copies of tinystories-656k give the f32 logits") {
  const char* models = std::getenv("STRATA_MODELS_DIR");
  if (models == nullptr) return strata_test::skip("tinystories-656k not found (STRATA_MODELS_DIR unset)");
  const std::filesystem::path source = std::filesystem::path(models) / "tinystories-656k";
  SafetensorsArchive archive = SafetensorsArchive::open_model_dir(source);
  const std::vector<int32_t> prompt = {1, 80, 147, 201, 282, 215, 286, 598, 629, 10};
  const std::vector<int32_t> table = {0};

  const auto logits_of = [&](const std::filesystem::path& dir) {
    CpuBackend backend(dir, CpuBackendOptions{1});
    backend.allocate_kv(1, 16);
    StepBatch batch;
    batch.seqs.push_back({prompt.data(), static_cast<int32_t>(prompt.size()), 0, table.data(), 1, true});
    std::vector<float> logits(backend.config().vocab_size);
    backend.forward(batch, logits.data());
    return logits;
  };
  const std::vector<float> reference = logits_of(source);

  for (const std::string dtype : {"BF16", "F16"}) {
    TempDir dir("half");
    std::filesystem::copy_file(source / "config.json", dir.path() / "config.json");
    std::vector<RawTensor> tensors;
    for (const TensorInfo& info : archive.tensors()) {
      std::vector<float> values(info.nbytes / 4);
      std::memcpy(values.data(), info.data, info.nbytes);
      tensors.push_back({info.name, dtype, info.shape, strata_test::encode(values, dtype)});
    }
    strata_test::write_safetensors(dir.path() / "model.safetensors", tensors);
    std::vector<float> logits = logits_of(dir.path());
    double max_diff = 0.0;
    size_t argmax = 0, reference_argmax = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[i]) - reference[i]));
      if (logits[i] > logits[argmax]) argmax = i;
      if (reference[i] > reference[reference_argmax]) reference_argmax = i;
    }
    std::printf("  %s: max |logit - f32 logit| = %.3g\n", dtype.c_str(), max_diff);
    // The checkpoint's values are bf16-representable and within f16's range and precision, so
    // both copies hold the same numbers and must give the same logits to the bit.
    CHECK_EQ(max_diff, 0.0);
    CHECK_EQ(argmax, reference_argmax);
  }
}

TEST_MAIN()
