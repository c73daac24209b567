#pragma once

#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "core/error.hpp"

namespace dally::net {

/// The category of every error Dally returns through CAF.
constexpr caf::atom_value error_category = caf::atom("dally");

/// A Dally error as CAF carries it: code, category `dally`, and the message
/// as context.
caf::error to_caf(const core::error& err);

/// Shorthand for `to_caf(core::error{code, message})`.
caf::error make_caf_error(core::errc code, std::string message);

/// Back from CAF: Dally errors keep code and message; CAF's own errors
/// (timeouts, dead peers) become unavailable with CAF's description,
/// so callers can branch on one enum.
core::error from_caf(const caf::error& err);

/// A line for people: "invalid_topic: topic is empty".
std::string describe(const caf::error& err);

} // namespace dally::net
