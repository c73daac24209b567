#include "net/error.hpp"

#include <caf/exit_reason.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace dally::net {

caf::error to_caf(const core::error& err) {
  if (!err)
    return caf::none;
  return caf::error{static_cast<uint8_t>(err.code()), error_category,
                    caf::make_message(err.message())};
}

caf::error make_caf_error(core::errc code, std::string message) {
  return to_caf(core::error{code, std::move(message)});
}

namespace {

/// CAF's own errors, rendered without `caf::to_string(error)`, which
/// needs a live actor system's renderers and crashes without one.
std::string caf_text(const caf::error& err) {
  std::string text;
  if (err.category() == caf::atom("system"))
    text = to_string(static_cast<caf::sec>(err.code()));
  else if (err.category() == caf::atom("exit"))
    text = to_string(static_cast<caf::exit_reason>(err.code()));
  else
    text = to_string(err.category()) + " error " +
           std::to_string(static_cast<int>(err.code()));
  return text;
}

std::string context_text(const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return ctx.empty() ? std::string{} : to_string(ctx);
}

} // namespace

core::error from_caf(const caf::error& err) {
  if (!err)
    return {};
  if (err.category() == error_category)
    return core::error{static_cast<core::errc>(err.code()), context_text(err)};
  return core::error{core::errc::unavailable, caf_text(err)};
}

std::string describe(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() == error_category) {
    auto text =
      std::string{core::to_string(static_cast<core::errc>(err.code()))};
    auto ctx = context_text(err);
    if (!ctx.empty())
      text += ": " + ctx;
    return text;
  }
  return caf_text(err);
}

} // namespace dally::net
