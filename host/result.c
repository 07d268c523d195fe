/*
 * host/result.c — sbx_result: the outcome of a command that ran. Both
 * output buffers are always valid (NUL-terminated, binary-safe, never NULL).
 */
#include <stdlib.h>

#include "internal.h"

sbx_result *
sbx_result_new(void)
{
    sbx_result *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->out = calloc(1, 1);
    r->err = calloc(1, 1);
    if (!r->out || !r->err) {
        sbx_result_free(r);
        return NULL;
    }
    return r;
}

int
sbx_result_take_output(sbx_result *result, sbx_stream stream, sbx_buf *b)
{
    size_t len = 0;
    char *data = sbx_buf_steal(b, &len);

    if (!data)
        return -1;
    if (stream == SBX_STREAM_STDERR) {
        free(result->err);
        result->err = data;
        result->err_len = len;
    } else {
        free(result->out);
        result->out = data;
        result->out_len = len;
    }
    return 0;
}

SBX_EXPORT const char *
sbx_result_get0_stdout(const sbx_result *result, size_t *len)
{
    if (len)
        *len = result ? result->out_len : 0;
    return result ? result->out : "";
}

SBX_EXPORT const char *
sbx_result_get0_stderr(const sbx_result *result, size_t *len)
{
    if (len)
        *len = result ? result->err_len : 0;
    return result ? result->err : "";
}

SBX_EXPORT int
sbx_result_get_exit_code(const sbx_result *result)
{
    return result ? result->exit_code : -1;
}

SBX_EXPORT int
sbx_result_is_timed_out(const sbx_result *result)
{
    return result ? result->timed_out : 0;
}

SBX_EXPORT int
sbx_result_is_oom_killed(const sbx_result *result)
{
    return result ? result->oom_killed : 0;
}

SBX_EXPORT int
sbx_result_is_stdout_truncated(const sbx_result *result)
{
    return result ? result->out_truncated : 0;
}

SBX_EXPORT int
sbx_result_is_stderr_truncated(const sbx_result *result)
{
    return result ? result->err_truncated : 0;
}

SBX_EXPORT double
sbx_result_get_duration_secs(const sbx_result *result)
{
    return result ? result->duration_secs : 0.0;
}

void
sbx_error_add_output(sbx_error *error, const sbx_result *result, size_t max)
{
    char *t;

    if (!error || !result)
        return;
    sbx_error_add_contextf(error, "exit_code", "%d", result->exit_code);
    t = sbx_strndup(result->out_len > max ? result->out + result->out_len - max : result->out,
                    result->out_len > max ? max : result->out_len);
    sbx_error_add_context(error, "stdout", t ? t : "");
    free(t);
    t = sbx_strndup(result->err_len > max ? result->err + result->err_len - max : result->err,
                    result->err_len > max ? max : result->err_len);
    sbx_error_add_context(error, "stderr", t ? t : "");
    free(t);
}

SBX_EXPORT void
sbx_result_free(sbx_result *result)
{
    if (!result)
        return;
    free(result->out);
    free(result->err);
    free(result);
}
