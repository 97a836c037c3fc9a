#include "text/tokenizer/hf_normalizer.h"

#include <vector>

#include "core/error.h"

#ifdef TESSERA_HAVE_ICU
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#endif

namespace tessera::text {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string cur(text);
    for (const auto& s : steps_) cur = s->normalize(cur);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

#ifdef TESSERA_HAVE_ICU
class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(const std::string& form, const std::string& where) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC")
      norm_ = icu::Normalizer2::getNFCInstance(status);
    else if (form == "NFD")
      norm_ = icu::Normalizer2::getNFDInstance(status);
    else if (form == "NFKC")
      norm_ = icu::Normalizer2::getNFKCInstance(status);
    else
      norm_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) core::fail("{}: cannot load the ICU {} normalizer", where, form);
  }
  std::string normalize(std::string_view text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
    const icu::UnicodeString out = norm_->normalize(in, status);
    if (U_FAILURE(status)) core::fail("Unicode normalization failed on a {}-byte input", text.size());
    std::string result;
    out.toUTF8String(result);
    return result;
  }

 private:
  const icu::Normalizer2* norm_ = nullptr;
};
#endif

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    core::fail("{}: expected an object with a string 'type'", where);
  const std::string type = spec["type"];
  if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) core::fail("{}.normalizers: missing or not an array", where);
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      auto step = make_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (step) steps.push_back(std::move(step));
    }
    if (steps.empty()) return nullptr;
    if (steps.size() == 1) return std::move(steps[0]);
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
#ifdef TESSERA_HAVE_ICU
    return std::make_unique<UnicodeNormalizer>(type, where);
#else
    core::fail(
        "{}: normalizer '{}' needs Unicode normalization tables; this build of tessera has no ICU "
        "(install libicu-dev and rebuild)",
        where, type);
#endif
  }
  core::fail("{}: unsupported normalizer type '{}' (supported: Sequence, NFC, NFD, NFKC, NFKD)", where, type);
}

}  // namespace tessera::text
