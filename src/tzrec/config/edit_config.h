// --edit_config_json: overrides config fields by dot paths, as TorchEasyRec's edit_config.
//
// Keys are dot paths into the message with list selectors: `a[0]` (index), `a[:]` (all),
// `a[1:3]` (slice), `a[field=value]` and `>=, <=, >, <` (condition on a sub-path of each
// element). Several paths can share one key separated by ';' with ';'-separated values.
// Scalars are cast to the field type (bools accept true/false/True/False, enums by name or
// number); message values are text format, optionally wrapped in {}; repeated scalars take
// a list. Errors name the offending path.
#pragma once

#include <string>

#include <google/protobuf/message.h>

namespace tzrec {

// Applies every key/value of a JSON object (given as text) to `config`.
void EditConfigJson(google::protobuf::Message* config, const std::string& edit_json);
// Applies one path/value pair; the value is the text form of the JSON value.
void EditConfigField(google::protobuf::Message* config, const std::string& path,
                     const std::string& value);

}  // namespace tzrec
