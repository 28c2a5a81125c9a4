#include "server/chat_renderer.h"

#include "chat/chat_template.h"

namespace braid::server {

ApiContext::Renderer chat_renderer(const std::string& model_dir) {
  if (model_dir.empty() || !chat::ChatTemplate::dir_has_template(model_dir)) return {};
  const chat::ChatTemplate t = chat::ChatTemplate::from_dir(model_dir);  // parsed once, shared
  return [t](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
             const nlohmann::ordered_json& kwargs, bool add_generation_prompt) {
    chat::RenderOptions o;
    o.add_generation_prompt = add_generation_prompt;
    o.tools = tools;
    o.extra = kwargs.is_object() ? kwargs : nlohmann::ordered_json::object();
    return t.render(messages, o);
  };
}

}  // namespace braid::server
