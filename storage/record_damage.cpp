#include "storage/record_damage.hpp"

#include <memory>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "proto/dally.pb.h"
#include "storage/rocks_task_store.hpp"

namespace dally::storage {

namespace {

core::error failed(const rocksdb::Status& status, const std::string& what) {
  return core::error{core::errc::io_error, what + ": " + status.ToString()};
}

std::string damaged(const std::string& value, core::task_id id,
                    record_damage how) {
  switch (how) {
    case record_damage::garbage:
      // 0xff is field 31 with wire type 7, which does not exist.
      return "\xff\xff damaged " + std::to_string(id);
    case record_damage::invalid_field: {
      v1::TaskRecord msg;
      msg.ParseFromString(value);
      msg.set_state(v1::TASK_STATE_UNSPECIFIED);
      return msg.SerializeAsString();
    }
    case record_damage::wrong_id: {
      v1::TaskRecord msg;
      msg.ParseFromString(value);
      msg.set_id(id + 1);
      return msg.SerializeAsString();
    }
  }
  return value;
}

} // namespace

core::error damage_task_record(const store_options& opts, core::task_id id,
                               record_damage how) {
  rocksdb::Options options;
  std::unique_ptr<rocksdb::Env> env;
  if (opts.file_system) {
    env = rocksdb::NewCompositeEnv(opts.file_system);
    options.env = env.get();
  }
  std::vector<std::string> names;
  auto status = rocksdb::DB::ListColumnFamilies(options, opts.path, &names);
  if (!status.ok())
    return failed(status, "listing the column families of " + opts.path);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  status = rocksdb::DB::Open(options, opts.path, descriptors, &handles, &raw);
  if (!status.ok())
    return failed(status, "opening " + opts.path);
  std::unique_ptr<rocksdb::DB> db{raw};
  rocksdb::ColumnFamilyHandle* tasks = nullptr;
  for (auto* handle : handles)
    if (handle->GetName() == "tasks")
      tasks = handle;
  core::error out;
  std::string value;
  auto key = encode_task_key(id);
  if (tasks == nullptr) {
    out = core::error{core::errc::not_found, opts.path + " has no tasks"};
  } else if (status = db->Get(rocksdb::ReadOptions{}, tasks, key, &value);
             status.IsNotFound()) {
    out = core::error{core::errc::not_found,
                      "no record of task " + std::to_string(id)};
  } else if (!status.ok()) {
    out = failed(status, "reading task " + std::to_string(id));
  } else {
    rocksdb::WriteOptions sync;
    sync.sync = true;
    status = db->Put(sync, tasks, key, damaged(value, id, how));
    if (!status.ok())
      out = failed(status, "writing task " + std::to_string(id));
  }
  for (auto* handle : handles)
    db->DestroyColumnFamilyHandle(handle);
  if (status = db->Close(); !status.ok() && !out)
    out = failed(status, "closing " + opts.path);
  return out;
}

} // namespace dally::storage
