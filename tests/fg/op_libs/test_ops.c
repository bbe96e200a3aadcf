/* A custom_feature operator library for tests, written in plain C against
 * src/tzrec/fg/tzrec_fg_custom_op.h (which it thereby checks to be C). Built twice: as
 * libtzrec_fg_test_ops.so, and with TZREC_FG_TEST_ABI_VERSION=999 as a library of a future
 * ABI that tzrec must refuse. Operators:
 *   Probe      numbers: each value of input 0 plus 1; fails when two calls on one instance
 *              overlap (each call stays inside for params.sleep_us microseconds, default 200)
 *   Echo       texts: the values of input 0
 *   Fail       numbers: value "bad" fails with a message, "silent" fails without one
 *   WrongKind  declares numbers, appends a text
 *   BadKind    declares an output kind that does not exist
 */
#define _POSIX_C_SOURCE 200809L
#define TZREC_FG_OP_BUILDING_LIBRARY
#include "tzrec/fg/tzrec_fg_custom_op.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef TZREC_FG_TEST_ABI_VERSION
#define TZREC_FG_TEST_ABI_VERSION TZREC_FG_OP_ABI_VERSION
#endif

enum { kProbe, kEcho, kFail, kWrongKind, kBadKind };

typedef struct test_op {
  int which;
  long sleep_us;
  atomic_int in_flight;
} test_op;

uint32_t tzrec_fg_op_abi_version(void) { return TZREC_FG_TEST_ABI_VERSION; }

void* tzrec_fg_op_create(const char* operator_name, const char* params_json,
                         const char* const* input_names, size_t num_inputs, char* error,
                         size_t error_len) {
  static const char* const kNames[] = {"Probe", "Echo", "Fail", "WrongKind", "BadKind"};
  int which = -1;
  for (int i = 0; i < 5; ++i) {
    if (strcmp(operator_name, kNames[i]) == 0) which = i;
  }
  if (which < 0) {
    snprintf(error, error_len, "unknown operator '%s'; known: Probe, Echo, Fail, WrongKind, BadKind",
             operator_name);
    return NULL;
  }
  if (num_inputs != 1) {
    snprintf(error, error_len, "%s needs 1 input, got %zu", operator_name, num_inputs);
    return NULL;
  }
  (void)input_names;
  test_op* op = calloc(1, sizeof(test_op));
  op->which = which;
  op->sleep_us = 200;
  const char* sleep = strstr(params_json, "\"sleep_us\":");
  if (sleep) op->sleep_us = strtol(sleep + strlen("\"sleep_us\":"), NULL, 10);
  atomic_init(&op->in_flight, 0);
  return op;
}

int32_t tzrec_fg_op_output_kind(const void* op) {
  switch (((const test_op*)op)->which) {
    case kEcho: return TZREC_FG_OUTPUT_TEXTS;
    case kBadKind: return 7;
    default: return TZREC_FG_OUTPUT_NUMBERS;
  }
}

static int Error(const tzrec_fg_output* out, const char* message) {
  out->set_error(out->context, message, strlen(message));
  return 1;
}

int32_t tzrec_fg_op_compute(void* handle, const tzrec_fg_input* inputs, size_t num_inputs,
                            const tzrec_fg_output* out) {
  test_op* op = handle;
  const tzrec_fg_input* in = &inputs[0];
  if (num_inputs != 1) return Error(out, "wrong number of inputs");
  switch (op->which) {
    case kProbe: {
      int overlapped = atomic_fetch_add(&op->in_flight, 1) != 0;
      struct timespec pause = {0, op->sleep_us * 1000};
      nanosleep(&pause, NULL);
      overlapped |= atomic_load(&op->in_flight) != 1;
      for (size_t i = 0; i < in->num_items; ++i) {
        char number[64];
        size_t n = in->items[i].size < sizeof(number) - 1 ? in->items[i].size : sizeof(number) - 1;
        memcpy(number, in->items[i].data, n);
        number[n] = '\0';
        out->append_number(out->context, strtod(number, NULL) + 1);
      }
      atomic_fetch_sub(&op->in_flight, 1);
      return overlapped ? Error(out, "called concurrently on one instance") : 0;
    }
    case kEcho:
      for (size_t i = 0; i < in->num_items; ++i) {
        out->append_text(out->context, in->items[i].data, in->items[i].size);
      }
      return 0;
    case kFail:
      if (in->text.size == 3 && memcmp(in->text.data, "bad", 3) == 0) return Error(out, "bad value");
      if (in->text.size == 6 && memcmp(in->text.data, "silent", 6) == 0) return 5;
      out->append_number(out->context, 1);
      return 0;
    case kWrongKind:
      out->append_text(out->context, "x", 1);
      return 0;
    default:
      return 0;
  }
}

void tzrec_fg_op_destroy(void* op) { free(op); }
