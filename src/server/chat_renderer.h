// The chat renderer the server hands its request parser: the model folder's chat template
// (tokenizer_config.json's chat_template, or chat_template.jinja) through our Jinja interpreter.
#pragma once

#include <string>

#include "server/openai_request.h"

namespace braid::server {

// Empty when the folder has no chat template (the server then answers chat requests with 400).
// Throws braid::Error for a template that does not parse.
ApiContext::Renderer chat_renderer(const std::string& model_dir);

}  // namespace braid::server
