#pragma once

#include <string>
#include <string_view>

namespace dally::core {

/// True if `text` is well-formed UTF-8 (no overlong forms, surrogates or
/// code points above U+10FFFF). Protobuf writes a malformed `string` field
/// but refuses to read it back, so text fields are checked before they are
/// accepted.
bool is_valid_utf8(std::string_view text) noexcept;

/// `text` with every byte that starts no well-formed sequence replaced by
/// U+FFFD, for text we produce ourselves (e.g. error reasons).
std::string sanitize_utf8(std::string_view text);

} // namespace dally::core
