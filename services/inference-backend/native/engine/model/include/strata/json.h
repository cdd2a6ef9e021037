// A small strict JSON (RFC 8259) reader for config.json and safetensors headers: no comments,
// no trailing commas, no duplicate keys, UTF-8 checked, nesting depth bounded. Errors carry the
// byte offset so a message can point into the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class JsonError : public std::runtime_error {
 public:
  JsonError(const std::string& message, size_t offset)
      : std::runtime_error(message + " at byte " + std::to_string(offset)), offset_(offset) {}
  size_t offset() const noexcept { return offset_; }

 private:
  size_t offset_;
};

class JsonValue {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  // A number written without fraction or exponent that fits int64 (e.g. a safetensors offset).
  bool is_integer() const { return kind_ == Kind::Number && is_integer_; }

  // Typed access; a wrong kind throws JsonError at this value's offset.
  bool as_bool() const;
  double as_number() const;
  int64_t as_int64() const;
  const std::string& as_string() const;

  // Arrays and objects: elements (objects: member values) in document order.
  size_t size() const { return items_.size(); }
  const JsonValue& operator[](size_t i) const { return items_.at(i); }
  const std::vector<JsonValue>& items() const { return items_; }
  // Objects only: key of member i, and lookup by key (nullptr if absent or not an object).
  const std::string& key(size_t i) const { return keys_.at(i); }
  const JsonValue* find(std::string_view key) const;

  // Byte offset of the value's first character in the parsed text.
  size_t offset() const { return offset_; }
  static const char* kind_name(Kind kind);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool is_integer_ = false;
  double number_ = 0.0;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<std::string> keys_;  // objects: keys_[i] names items_[i]
  std::vector<JsonValue> items_;
  size_t offset_ = 0;
};

// Parses one JSON document; anything but whitespace after it is an error.
JsonValue parse_json(std::string_view text);

}  // namespace strata
