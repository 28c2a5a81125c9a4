/* Compiled as C99 against libbraid.so: proves braid.h is plain C and the exported symbols link.
 * Runs rms_norm on the CPU through descriptors, checks one error path and that the braid_llm_*
 * functions link. Exit 0 = pass. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "braid/braid.h"

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "c_smoke: FAILED: %s\n", what);
    ++failures;
  }
}

static braid_tensor cpu_f32(float* data, int32_t ndim, int64_t* shape) {
  braid_tensor t;
  t.data = data;
  t.device.device_type = BRAID_DEVICE_CPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = BRAID_DTYPE_FLOAT;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

int main(void) {
  float x[2 * 3] = {1, 2, 3, -4, 5, -6};
  float w[3] = {1.0f, 0.5f, 2.0f};
  float out[2 * 3];
  int64_t x_shape[2] = {2, 3};
  int64_t w_shape[1] = {3};
  braid_tensor tx = cpu_f32(x, 2, x_shape);
  braid_tensor tw = cpu_f32(w, 1, w_shape);
  braid_tensor tout = cpu_f32(out, 2, x_shape);
  braid_tensor bad_w;
  int64_t bad_shape[1] = {4};
  float bad_data[4] = {0, 0, 0, 0};
  braid_status st;
  int r, i;

  printf("braidinfer %s, %d CUDA device(s)\n", braid_version(), braid_cuda_device_count());

  st = braid_rms_norm(&tx, &tw, 1e-6f, &tout, NULL);
  expect(st == BRAID_OK, "rms_norm returns BRAID_OK");
  for (r = 0; r < 2; ++r) {
    double ss = 0;
    for (i = 0; i < 3; ++i) ss += (double)x[r * 3 + i] * x[r * 3 + i];
    for (i = 0; i < 3; ++i) {
      double ref = w[i] * (x[r * 3 + i] / sqrt(ss / 3 + 1e-6));
      expect(fabs(out[r * 3 + i] - ref) <= 1e-5 * (1 + fabs(ref)), "rms_norm value");
    }
  }

  bad_w = cpu_f32(bad_data, 1, bad_shape);
  st = braid_rms_norm(&tx, &bad_w, 1e-6f, &tout, NULL);
  expect(st == BRAID_ERR_SHAPE, "a wrong weight shape returns BRAID_ERR_SHAPE");
  expect(strstr(braid_last_error_message(), "weight") != NULL, "the message names 'weight'");
  expect(strcmp(braid_status_string(BRAID_ERR_SHAPE), "BRAID_ERR_SHAPE") == 0, "status string");

  /* The offline-inference entry points link from C; a NULL folder is an error, not a crash. */
  {
    braid_llm* llm = NULL;
    char* out = NULL;
    st = braid_llm_create(NULL, "{\"device\": \"cpu\"}", &llm);
    expect(st == BRAID_ERR_INVALID_ARGUMENT && llm == NULL, "braid_llm_create(NULL) fails");
    expect(strstr(braid_last_error_message(), "model_dir") != NULL, "the message names model_dir");
    st = braid_llm_generate(NULL, "[]", &out);
    expect(st == BRAID_ERR_INVALID_ARGUMENT && out == NULL, "braid_llm_generate(NULL) fails");
    braid_llm_destroy(NULL);
    braid_free_string(NULL);
  }

  if (failures == 0) printf("c_smoke: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
