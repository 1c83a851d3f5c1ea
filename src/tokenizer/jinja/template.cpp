// Template: parse once, render many times; JSON values in.
#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/eval.h"

namespace basalt::tok::jinja {

Template::Template(const std::string& source)
    : body_(std::make_shared<const Body>(parse(lex(source)))) {}

std::string Template::render(const DictObj& vars) const {
  Evaluator ev(vars);
  std::string out;
  ev.render(*body_, out);
  return out;
}

namespace {

template <typename J>
Value from_json(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value(None{});
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(*it));
      return make_dict(std::move(items));
    }
    default:
      return Value(None{});
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& j) {
  return from_json(j);
}
Value value_from_json(const nlohmann::json& j) {
  return from_json(j);
}

}  // namespace basalt::tok::jinja
