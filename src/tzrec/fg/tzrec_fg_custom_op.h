/*
 * tzrec_fg_custom_op.h: the C ABI between tzrec's feature generation and a custom_feature
 * operator library (version 1).
 *
 * A `custom_feature` names a shared library (`operator_lib_file`) and an operator in it
 * (`operator_name`). tzrec dlopen()s the library (RTLD_NOW | RTLD_LOCAL), checks
 * tzrec_fg_op_abi_version(), creates one operator instance per feature with
 * tzrec_fg_op_create(), then calls tzrec_fg_op_compute() once per row (once per step for a
 * sequence feature) and tzrec_fg_op_destroy() when the feature generator goes away. What the
 * operator appends to its output then gets the feature's `default_value` (when it appended
 * nothing) and bucketizer, exactly as for the built-in feature types.
 *
 * The header is plain C (C99) and can be included from C or C++. One library may hold any
 * number of operators: tzrec_fg_op_create() dispatches on the operator name. Everything
 * crosses the boundary as plain data or function pointers, so neither side ever frees the
 * other's memory, and the library may use any C++ runtime or allocator internally.
 *
 * Writing an operator library:
 *   - define TZREC_FG_OP_BUILDING_LIBRARY before including this header (or compile with
 *     -fvisibility=hidden and mark the five functions TZREC_FG_OP_EXPORT yourself);
 *   - export the five functions declared below with C linkage;
 *   - never let a C++ exception cross them (catch everything and report an error).
 * src/tzrec/fg/builtin_ops/ is a complete example (EditDistance, RegexReplace, SeqExpr).
 *
 * Threads:
 *   - tzrec_fg_op_abi_version, tzrec_fg_op_create and tzrec_fg_op_destroy may be called from
 *     any thread, and create/destroy of different instances concurrently.
 *   - tzrec_fg_op_compute on ONE instance runs concurrently from several threads only when the
 *     feature sets `is_op_thread_safe: true`. With `is_op_thread_safe: false` (the default)
 *     tzrec holds a per-instance mutex around every call, so one instance sees one call at a
 *     time (possibly from different threads).
 *   - Different instances may always be computed concurrently: state shared between
 *     instances (globals, caches) must be synchronised by the library.
 *
 * Versioning: TZREC_FG_OP_ABI_VERSION changes whenever a declaration here changes in an
 * incompatible way; tzrec refuses a library whose tzrec_fg_op_abi_version() differs.
 */
#ifndef TZREC_FG_CUSTOM_OP_H_
#define TZREC_FG_CUSTOM_OP_H_

#include <stddef.h>
#include <stdint.h>

#define TZREC_FG_OP_ABI_VERSION 1

#if defined(TZREC_FG_OP_BUILDING_LIBRARY)
#define TZREC_FG_OP_EXPORT __attribute__((visibility("default")))
#else
#define TZREC_FG_OP_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A byte string that is not NUL-terminated. Valid only during the call it is passed to. */
typedef struct tzrec_fg_string {
  const char* data;
  size_t size;
} tzrec_fg_string;

/* One input of the feature (one `expression` entry, in config order) for one row or step. */
typedef struct tzrec_fg_input {
  /* Nonzero when the input has no value here (null or empty cell, or a sequence step past
     this input's end). Then `text` is empty and `num_items` is 0. */
  int32_t missing;
  /* The whole value of the row (or of the step, for a sequence input), unsplit. */
  tzrec_fg_string text;
  /* `text` split by the feature's `separator` (default "\x1d"), empty pieces dropped. A
     Parquet LIST cell gives its elements. */
  const tzrec_fg_string* items;
  size_t num_items;
} tzrec_fg_input;

/* What an operator yields: numbers (dense values, or bucketized by boundaries / num_buckets
   / hashed as numbers) or texts (hashed or looked up in a vocabulary; parsed as numbers for
   a dense feature). */
#define TZREC_FG_OUTPUT_NUMBERS 1
#define TZREC_FG_OUTPUT_TEXTS 2

/* Where tzrec_fg_op_compute writes. The callbacks copy what they are given before they
   return, must be called only from inside tzrec_fg_op_compute on the calling thread, and
   are valid only during that call. Pass `context` back unchanged. */
typedef struct tzrec_fg_output {
  void* context;
  /* Appends one value to a TZREC_FG_OUTPUT_NUMBERS operator's output. */
  void (*append_number)(void* context, double value);
  /* Appends one value (bytes, need not be NUL-terminated) to a TZREC_FG_OUTPUT_TEXTS
     operator's output. */
  void (*append_text)(void* context, const char* data, size_t size);
  /* Describes why tzrec_fg_op_compute is about to return nonzero (the last call wins). */
  void (*set_error)(void* context, const char* message, size_t size);
} tzrec_fg_output;

/* Returns TZREC_FG_OP_ABI_VERSION as the library was compiled with it. Called first; the
   library is refused when it differs from tzrec's. */
TZREC_FG_OP_EXPORT uint32_t tzrec_fg_op_abi_version(void);

/* Creates an instance of operator `operator_name` (NUL-terminated).
   `params_json`: the feature's `operator_params` as a JSON object (NUL-terminated; "{}" when
     unset; protobuf Struct numbers arrive as JSON numbers, lists as arrays).
   `input_names`, `num_inputs`: the feature's inputs in order, each the name after "side:"
     (e.g. "cur_time" for "user:cur_time"); the same count arrives at every compute call.
   On failure (unknown operator, bad params, wrong number of inputs) returns NULL and writes
   a NUL-terminated message of at most `error_len` bytes (terminator included) to `error`;
   name the known operators when `operator_name` is unknown. */
TZREC_FG_OP_EXPORT void* tzrec_fg_op_create(const char* operator_name, const char* params_json,
                                            const char* const* input_names, size_t num_inputs,
                                            char* error, size_t error_len);

/* TZREC_FG_OUTPUT_NUMBERS or TZREC_FG_OUTPUT_TEXTS: what `op` appends. Fixed per instance;
   asked once, right after create. */
TZREC_FG_OP_EXPORT int32_t tzrec_fg_op_output_kind(const void* op);

/* Computes one row (or sequence step): reads `inputs[0 .. num_inputs)`, appends zero or more
   values through `out` (appending nothing means "no value": the feature's default_value
   applies), returns 0. On bad input values returns nonzero, after out->set_error; tzrec then
   fails naming the file, row, feature and operator. Must not keep pointers into `inputs` or
   `out` past the call. */
TZREC_FG_OP_EXPORT int32_t tzrec_fg_op_compute(void* op, const tzrec_fg_input* inputs,
                                               size_t num_inputs, const tzrec_fg_output* out);

/* Frees an instance created by tzrec_fg_op_create (never NULL); no call on it follows. */
TZREC_FG_OP_EXPORT void tzrec_fg_op_destroy(void* op);

/* Pointer types of the five functions, for dlsym(). */
typedef uint32_t (*tzrec_fg_op_abi_version_fn)(void);
typedef void* (*tzrec_fg_op_create_fn)(const char*, const char*, const char* const*, size_t,
                                       char*, size_t);
typedef int32_t (*tzrec_fg_op_output_kind_fn)(const void*);
typedef int32_t (*tzrec_fg_op_compute_fn)(void*, const tzrec_fg_input*, size_t,
                                          const tzrec_fg_output*);
typedef void (*tzrec_fg_op_destroy_fn)(void*);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TZREC_FG_CUSTOM_OP_H_ */
