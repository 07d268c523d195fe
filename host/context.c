/*
 * host/context.c — agent specs: an agent inside the sandbox (a command fed
 * the prompt by stdin, argv, a file or not at all) and one outside it (a
 * callback given a context whose calls are checked against the
 * capabilities granted), and agent_tools (that same checked context for
 * any agent framework). The reference's AgentSpec.inside / .outside,
 * AgentContext and agent_tools(caps).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct sbx_agent_context {
    sbx_sandbox *sandbox;        /* borrowed */
    unsigned caps;
};

static const struct {
    unsigned cap;
    const char *name;
} cap_names[] = {
    { SBX_AGENT_CAP_SHELL, "shell" },
    { SBX_AGENT_CAP_FILES, "files" },
    { SBX_AGENT_CAP_PATCH, "patch" },
    { SBX_AGENT_CAP_PORTS, "ports" },
    { SBX_AGENT_CAP_ARTIFACTS, "artifacts" },
};

SBX_EXPORT const char *
sbx_agent_capability_name(unsigned cap)
{
    for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
        if (cap_names[i].cap == cap)
            return cap_names[i].name;
    return NULL;
}

SBX_EXPORT sbx_agent_context *
sbx_sandbox_agent_tools(sbx_sandbox *sandbox, unsigned capabilities, sbx_error **error)
{
    sbx_error *err = NULL;
    sbx_agent_context *ctx;

    if (sbx_sandbox_check_usable(sandbox, &err) < 0)
        goto fail;
    if (capabilities & ~(unsigned)SBX_AGENT_CAP_ALL) {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "agent_tools",
                                     "unknown agent capability bits 0x%x",
                                     capabilities & ~(unsigned)SBX_AGENT_CAP_ALL);
        sbx_error_add_contextf(e, "capabilities", "0x%x", capabilities);
        goto fail;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "agent_tools", "out of memory");
        goto fail;
    }
    ctx->sandbox = sandbox;
    ctx->caps = capabilities;
    return ctx;
fail:
    sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, "agent_tools");
    sbx_error_propagate(error, err);
    return NULL;
}

SBX_EXPORT unsigned
sbx_agent_context_get_capabilities(const sbx_agent_context *ctx)
{
    return ctx ? ctx->caps : 0;
}

SBX_EXPORT void
sbx_agent_context_free(sbx_agent_context *ctx)
{
    free(ctx);
}

/* 0 when @ctx was granted @cap; else -1 with feature_not_supported naming
 * the capability and @op. */
static int
require(const sbx_agent_context *ctx, unsigned cap, const char *op, sbx_error **error)
{
    sbx_error *err = NULL, *e;

    if (!ctx) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "the agent context is NULL");
        sbx_error_propagate(error, err);
        return -1;
    }
    if (ctx->caps & cap)
        return 0;
    e = sbx_set_error(&err, SBX_ERROR_FEATURE_NOT_SUPPORTED, op,
                      "the agent was not granted the \"%s\" capability, which %s needs",
                      sbx_agent_capability_name(cap), op);
    sbx_error_add_context(e, "capability", sbx_agent_capability_name(cap));
    sbx_error_fill(err, ctx->sandbox->client->backend, op);
    sbx_error_propagate(error, err);
    return -1;
}

SBX_EXPORT sbx_result *
sbx_agent_context_shell(sbx_agent_context *ctx, const char *script, double timeout_secs,
                        sbx_error **error)
{
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;

    if (require(ctx, SBX_AGENT_CAP_SHELL, "shell", error) < 0)
        return NULL;
    req.shell = script;
    req.timeout_secs = timeout_secs;
    return sbx_sandbox_execute_command(ctx->sandbox, &req, error);
}

SBX_EXPORT int
sbx_agent_context_list_files(sbx_agent_context *ctx, const char *path, sbx_file_info ***list,
                             size_t *count, sbx_error **error)
{
    if (list)
        *list = NULL;
    if (count)
        *count = 0;
    if (require(ctx, SBX_AGENT_CAP_FILES, "list_files", error) < 0)
        return -1;
    return sbx_sandbox_list_files(ctx->sandbox, path, list, count, error);
}

SBX_EXPORT int
sbx_agent_context_read_file(sbx_agent_context *ctx, const char *path, char **data, size_t *len,
                            sbx_error **error)
{
    if (data)
        *data = NULL;
    if (require(ctx, SBX_AGENT_CAP_FILES, "read_file", error) < 0)
        return -1;
    return sbx_sandbox_read_file(ctx->sandbox, path, data, len, error);
}

SBX_EXPORT int
sbx_agent_context_write_file(sbx_agent_context *ctx, const char *path, const void *data,
                             size_t len, sbx_error **error)
{
    if (require(ctx, SBX_AGENT_CAP_FILES, "write_file", error) < 0)
        return -1;
    return sbx_sandbox_write_file(ctx->sandbox, path, data, len, error);
}

SBX_EXPORT int
sbx_agent_context_apply_patch(sbx_agent_context *ctx, const char *patch, size_t len, int strip,
                              const char *dir, sbx_error **error)
{
    if (require(ctx, SBX_AGENT_CAP_PATCH, "apply_patch", error) < 0)
        return -1;
    return sbx_sandbox_apply_patch(ctx->sandbox, patch, len, strip, dir, error);
}

SBX_EXPORT char *
sbx_agent_context_resolve_port(sbx_agent_context *ctx, unsigned port, sbx_error **error)
{
    if (require(ctx, SBX_AGENT_CAP_PORTS, "resolve_port", error) < 0)
        return NULL;
    return sbx_sandbox_resolve_port(ctx->sandbox, port, error);
}

SBX_EXPORT int
sbx_agent_context_list_ports(sbx_agent_context *ctx, uint16_t **ports, size_t *count,
                             sbx_error **error)
{
    if (ports)
        *ports = NULL;
    if (count)
        *count = 0;
    if (require(ctx, SBX_AGENT_CAP_PORTS, "list_ports", error) < 0)
        return -1;
    return sbx_sandbox_list_ports(ctx->sandbox, ports, count, error);
}

SBX_EXPORT int
sbx_agent_context_expose_port(sbx_agent_context *ctx, unsigned port, sbx_error **error)
{
    if (require(ctx, SBX_AGENT_CAP_PORTS, "expose_port", error) < 0)
        return -1;
    return sbx_sandbox_expose_port(ctx->sandbox, port, error);
}

SBX_EXPORT int
sbx_agent_context_unexpose_port(sbx_agent_context *ctx, unsigned port, sbx_error **error)
{
    if (require(ctx, SBX_AGENT_CAP_PORTS, "unexpose_port", error) < 0)
        return -1;
    return sbx_sandbox_unexpose_port(ctx->sandbox, port, error);
}

SBX_EXPORT char *
sbx_sandbox_run_outside_agent(sbx_sandbox *sandbox, unsigned capabilities,
                              sbx_outside_agent_fn fn, const char *prompt, void *user_data,
                              sbx_error **error)
{
    sbx_agent_context *ctx;
    sbx_error *err = NULL;
    char *answer = NULL;
    int rc;

    if (!fn) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, "run_outside_agent",
                      "the agent callback is NULL");
        sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, "run_outside_agent");
        sbx_error_propagate(error, err);
        return NULL;
    }
    ctx = sbx_sandbox_agent_tools(sandbox, capabilities, error);
    if (!ctx)
        return NULL;
    rc = fn(ctx, prompt, user_data, &answer, &err);
    sbx_agent_context_free(ctx);
    if (rc != 0) {
        free(answer);
        if (!err)
            sbx_set_error(&err, SBX_ERROR_EXECUTION_FAILED, "run_outside_agent",
                          "the outside agent failed without saying why");
        sbx_error_fill(err, sandbox->client->backend, "run_outside_agent");
        sbx_error_propagate(error, err);
        return NULL;
    }
    sbx_error_free(err);
    if (!answer && !(answer = strdup(""))) {
        sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, "run_outside_agent", "out of memory");
        sbx_error_propagate(error, err);
    }
    return answer;
}

SBX_EXPORT sbx_result *
sbx_sandbox_run_inside_agent(sbx_sandbox *sandbox, const sbx_inside_agent *spec,
                             const char *prompt, sbx_error **error)
{
    static const char op[] = "run_inside_agent";
    sbx_inside_agent s = SBX_INSIDE_AGENT_INIT;
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    sbx_strv env = { 0 }, argv = { 0 };
    sbx_error *err = NULL;
    sbx_result *r = NULL;
    const char *input_path;
    int wrote = 0;

    if (!spec || !spec->command || !*spec->command) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "the agent's command is %s",
                      spec ? "empty" : "missing (NULL spec)");
        goto out;
    }
    memcpy(&s, spec, spec->struct_size < sizeof(s) ? spec->struct_size : sizeof(s));
    s.struct_size = sizeof(s);
    input_path = s.input_path ? s.input_path : SBX_AGENT_INPUT_PATH;
    if (s.input != SBX_AGENT_INPUT_NONE && !prompt) {
        sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op, "the prompt is NULL");
        goto out;
    }
    for (size_t i = 0; s.env && s.env[i]; i++)
        if (sbx_strv_push(&env, s.env[i]) < 0)
            goto oom;
    /* The command runs as `sh -c COMMAND`; with argv input the prompt is
     * its last argument ("$@" appended), never spliced into the script. */
    switch (s.input) {
    case SBX_AGENT_INPUT_STDIN:
        req.stdin_data = prompt;
        req.stdin_len = strlen(prompt);
        /* fall through */
    case SBX_AGENT_INPUT_NONE:
        if (sbx_strv_push(&argv, "/bin/sh") < 0 || sbx_strv_push(&argv, "-c") < 0 ||
            sbx_strv_push(&argv, s.command) < 0)
            goto oom;
        break;
    case SBX_AGENT_INPUT_ARGV:
        if (sbx_strv_push(&argv, "/bin/sh") < 0 || sbx_strv_push(&argv, "-c") < 0 ||
            sbx_strv_pushf(&argv, "%s \"$@\"", s.command) < 0 ||
            sbx_strv_push(&argv, "sh") < 0 || sbx_strv_push(&argv, prompt) < 0)
            goto oom;
        break;
    case SBX_AGENT_INPUT_FILE:
        if (sbx_sandbox_write_file(sandbox, input_path, prompt, strlen(prompt), &err) < 0)
            goto out;
        wrote = 1;
        if (sbx_strv_pushf(&env, "SBX_AGENT_INPUT=%s", input_path) < 0 ||
            sbx_strv_push(&argv, "/bin/sh") < 0 || sbx_strv_push(&argv, "-c") < 0 ||
            sbx_strv_push(&argv, s.command) < 0)
            goto oom;
        break;
    default: {
        sbx_error *e = sbx_set_error(&err, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "unknown input mode %d", (int)s.input);
        sbx_error_add_contextf(e, "input", "%d", (int)s.input);
        goto out;
    }
    }
    req.argv = sbx_strv_view(&argv);
    req.env = env.count ? sbx_strv_view(&env) : NULL;
    req.cwd = s.cwd;
    req.timeout_secs = s.timeout_secs;
    r = sbx_sandbox_execute_command(sandbox, &req, &err);
    goto out;
oom:
    sbx_set_error(&err, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
out:
    /* The prompt file does not outlive the call. */
    if (wrote)
        sbx_sandbox_remove_path(sandbox, input_path, NULL, NULL);
    sbx_strv_clear(&env);
    sbx_strv_clear(&argv);
    if (!r) {
        sbx_error_fill(err, sandbox ? sandbox->client->backend : NULL, op);
        sbx_error_propagate(error, err);
    }
    return r;
}
