// An OMPT tool that registers only the EMI forms of the target callbacks (as Score-P and
// rocprof-sys do) and checks their contract: begin/end pairs, the target_data it attaches at
// a region's begin handed back inside the region, and the host_op_id it sets at an
// operation's begin handed back at its end. One line per callback on stderr, prefixed
// "EMI ", and a last line with the counts; a broken contract prints "EMI BAD ...".
#include <omp-tools.h>
#include <stdio.h>

static ompt_set_callback_t set_callback;
static int targets, data_ops, submits;
static unsigned long next_region = 100, next_op = 1000;
static unsigned long open_op; // host_op_id of the operation begun and not ended

static const char *endpoint(ompt_scope_endpoint_t e) { return e == ompt_scope_begin ? "begin" : "end"; }

static void on_target(ompt_target_t kind, ompt_scope_endpoint_t e, int device, ompt_data_t *task_data,
                      ompt_data_t *target_task_data, ompt_data_t *target_data, const void *codeptr) {
  (void)task_data, (void)target_task_data, (void)codeptr, (void)device;
  targets++;
  if (e == ompt_scope_begin) {
    target_data->value = ++next_region;
  } else if (target_data->value != next_region) {
    fprintf(stderr, "EMI BAD target end: target_data %lu, attached %lu\n", (unsigned long)target_data->value,
            next_region);
  }
  fprintf(stderr, "EMI target kind=%d %s\n", (int)kind, endpoint(e));
}

static void on_data_op(ompt_scope_endpoint_t e, ompt_data_t *target_task_data, ompt_data_t *target_data,
                       ompt_id_t *host_op_id, ompt_target_data_op_t op, void *src, int src_device, void *dst,
                       int dst_device, size_t bytes, const void *codeptr) {
  (void)target_task_data, (void)src, (void)src_device, (void)dst, (void)dst_device, (void)codeptr;
  data_ops++;
  if (target_data->value != next_region)
    fprintf(stderr, "EMI BAD data_op: target_data %lu, region %lu\n", (unsigned long)target_data->value,
            next_region);
  if (e == ompt_scope_begin) {
    *host_op_id = open_op = ++next_op;
  } else if (*host_op_id != open_op) {
    fprintf(stderr, "EMI BAD data_op end: host_op_id %lu, set %lu\n", (unsigned long)*host_op_id, open_op);
  }
  fprintf(stderr, "EMI data_op op=%d %s bytes=%zu\n", (int)op, endpoint(e), bytes);
}

static void on_submit(ompt_scope_endpoint_t e, ompt_data_t *target_data, ompt_id_t *host_op_id,
                      unsigned int teams) {
  (void)teams;
  submits++;
  if (target_data->value != next_region)
    fprintf(stderr, "EMI BAD submit: target_data %lu, region %lu\n", (unsigned long)target_data->value,
            next_region);
  if (e == ompt_scope_begin) {
    *host_op_id = open_op = ++next_op;
  } else if (*host_op_id != open_op) {
    fprintf(stderr, "EMI BAD submit end: host_op_id %lu, set %lu\n", (unsigned long)*host_op_id, open_op);
  }
  fprintf(stderr, "EMI submit %s\n", endpoint(e));
}

static int initialize(ompt_function_lookup_t lookup, int initial_device, ompt_data_t *tool_data) {
  (void)initial_device, (void)tool_data;
  set_callback = (ompt_set_callback_t)lookup("ompt_set_callback");
  set_callback(ompt_callback_target_emi, (ompt_callback_t)on_target);
  set_callback(ompt_callback_target_data_op_emi, (ompt_callback_t)on_data_op);
  set_callback(ompt_callback_target_submit_emi, (ompt_callback_t)on_submit);
  return 1;
}

static void finalize(ompt_data_t *tool_data) {
  (void)tool_data;
  fprintf(stderr, "EMI counts target=%d data_op=%d submit=%d\n", targets, data_ops, submits);
}

ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version, const char *runtime_version) {
  (void)omp_version, (void)runtime_version;
  static ompt_start_tool_result_t result = {initialize, finalize, {0}};
  return &result;
}
