// Subcommand groups of the braidinfer CLI. Each adds its subcommands to the app; the callback of
// the one the user picked stores its exit status in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "braid/tensor.h"

namespace braid::cli {

void add_info_command(CLI::App& app, int& exit_code);
void add_bench_commands(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_profile_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
// --device cpu | cuda | auto; errors name the command.
Device device_from_option(const std::string& name, const char* command);
// Makes `run` the callback of `cmd`, a command that needs the GPU: in a build without CUDA it
// prints "<name>: this build has no CUDA support" and exits with 2 instead.
void set_cuda_callback(CLI::App* cmd, const char* name, int& exit_code, std::function<int()> run);

// Subcommands of `bench`, each in its own file.
void add_bench_decode_command(CLI::App* bench, int& exit_code);
void add_bench_attention_command(CLI::App* bench, int& exit_code);
void add_bench_attention_decode_command(CLI::App* bench, int& exit_code);
void add_bench_gemv_command(CLI::App* bench, int& exit_code);
void add_bench_router_command(CLI::App* bench, int& exit_code);
void add_bench_moe_command(CLI::App* bench, int& exit_code);
void add_bench_moe_fp8_command(CLI::App* bench, int& exit_code);
void add_bench_kernels_command(CLI::App* bench, int& exit_code);
void add_bench_prefill_command(CLI::App* bench, int& exit_code);
void add_bench_all_command(CLI::App* bench, int& exit_code);
void add_bench_throughput_command(CLI::App* bench, int& exit_code);
// Needs no GPU: a network client of an OpenAI-compatible server.
void add_bench_serve_command(CLI::App* bench, int& exit_code);

}  // namespace braid::cli
