#include "core/utf8.hpp"

namespace dally::core {

namespace {

/// Length of the well-formed UTF-8 sequence at `text[i]`, 0 if there is
/// none.
size_t utf8_sequence_length(std::string_view text, size_t i) noexcept {
  auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80)
    return 1;
  size_t len = 0;
  uint32_t code_point = 0;
  uint32_t min_code_point = 0;
  if ((lead & 0xE0) == 0xC0) {
    len = 2;
    code_point = lead & 0x1F;
    min_code_point = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
    code_point = lead & 0x0F;
    min_code_point = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    len = 4;
    code_point = lead & 0x07;
    min_code_point = 0x10000;
  } else {
    return 0;
  }
  if (text.size() - i < len)
    return 0;
  for (size_t k = 1; k < len; ++k) {
    auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80)
      return 0;
    code_point = (code_point << 6) | (next & 0x3F);
  }
  if (code_point < min_code_point || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF))
    return 0;
  return len;
}

} // namespace

bool is_valid_utf8(std::string_view text) noexcept {
  for (size_t i = 0; i < text.size();) {
    auto len = utf8_sequence_length(text, i);
    if (len == 0)
      return false;
    i += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  std::string result;
  result.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (auto len = utf8_sequence_length(text, i); len > 0) {
      result.append(text.substr(i, len));
      i += len;
    } else {
      result.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return result;
}

} // namespace dally::core
