#include "logic/consumer_sends.hpp"

namespace dally::logic {

std::optional<verdict> verdict_of(const delivery_ref& ref,
                                  const v1::DeliveryReply& reply) {
  switch (reply.verdict()) {
    case v1::DeliveryReply::VERDICT_ACK:
      return verdict{ref, true, std::nullopt};
    case v1::DeliveryReply::VERDICT_NACK: {
      verdict out{ref, false, std::nullopt};
      if (reply.has_retry_in_ms())
        out.retry_in_ms = reply.retry_in_ms();
      return out;
    }
    default:
      return std::nullopt;
  }
}

std::vector<verdict> verdicts_of(const std::vector<delivery_ref>& refs,
                                 const v1::DeliveryBatchReply& reply) {
  std::vector<verdict> out;
  const auto& replies = reply.replies();
  auto n = std::min(refs.size(), static_cast<size_t>(replies.size()));
  for (size_t k = 0; k < n; ++k)
    if (auto v = verdict_of(refs[k], replies[static_cast<int>(k)]))
      out.push_back(std::move(*v));
  return out;
}

} // namespace dally::logic
