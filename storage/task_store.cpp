#include "storage/task_store.hpp"

namespace dally::storage {

task_store::~task_store() = default;

} // namespace dally::storage
