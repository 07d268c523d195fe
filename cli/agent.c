/*
 * sbx agent: one agent call (Claude Code, Codex or OpenCode) in a new
 * sandbox; its answer, or with --json its status, text, exit code and
 * usage (sbx.h, "Agents").
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx agent [OPTION]... PROMPT\n"
"\n"
"Create a sandbox, run one agent call in it with PROMPT (the agent CLI must be\n"
"installed there: a preset such as --preset claude-code installs it), print\n"
"its answer, destroy the sandbox. The status comes from the CLI's own status\n"
"fields, never from its text.\n"
"\n"
"      --harness=NAME      claude-code (default), codex or opencode\n"
"      --model=MODEL       the model (default: the CLI's)\n"
"      --arg=ARG           one more argument for the agent CLI (repeatable)\n"
"      --pass-env=NAME     pass this process's variable NAME to the agent\n"
"                          (repeatable): its credentials, such as\n"
"                          ANTHROPIC_API_KEY or OPENAI_API_KEY, reach it only so\n"
"                          or with --agent-env, never by themselves\n"
"      --agent-env=KEY=VALUE  set a variable for the agent call (repeatable)\n"
"      --json              print {status, reason, error_code, text, session_id,\n"
"                          exit_code, harness, usage} (tokens and costs as\n"
"                          numbers, exact decimals in USD, or null when unknown)\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable in the sandbox\n"
"                          (repeatable)\n"
"  -w, --workdir=DIR       directory the agent starts in, inside the sandbox\n"
"      --timeout=SECONDS   sandbox lifetime and the call's timeout (default %g)\n"
CLI_CREATION_OPTIONS_HELP
"\n"
"The environment variable SBX_LEDGER names a file that gets one JSON line per\n"
"agent call and per sandbox lifetime (backend, size, seconds, rate and its\n"
"source, tokens, LLM and compute costs).\n"
"\n"
"Exit status: 0 when the agent run succeeded; 1 when it ran and failed (the\n"
"reason on stderr); 125 when sbx itself failed or the CLI's output was not\n"
"its JSON; 128+N after signal N.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

/* What the agent's options set (the CLI runs one command at a time). */
static struct {
    sbx_agent_harness harness;
    const char *model;
    int json;
    const char **args;
    size_t nargs;
    const char **env;
    size_t nenv;
    const char **owned;       /* --pass-env's "KEY=VALUE" strings, ours to free */
    size_t nowned;
} agent;

static int push(const char ***v, size_t *n, const char *s)
{
    const char **bigger = realloc(*v, (*n + 2) * sizeof **v);

    if (bigger == NULL)
        return cli_out_of_memory();
    bigger[(*n)++] = s;
    bigger[*n] = NULL;
    *v = bigger;
    return CLI_GO_ON;
}

static int set_harness(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)ctx;
    agent.harness = sbx_agent_harness_from_name(arg);
    if (agent.harness == 0)
        return cli_usage_error(cmd, "unknown harness \"%s\": expected claude-code, codex or "
                                    "opencode", arg);
    return CLI_GO_ON;
}

static int set_model(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)cmd;
    (void)ctx;
    agent.model = arg;
    return CLI_GO_ON;
}

static int add_arg(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)cmd;
    (void)ctx;
    return push(&agent.args, &agent.nargs, arg);
}

static int add_agent_env(const cli_command *cmd, const char *arg, void *ctx)
{
    int status = cli_check_env(cmd, arg);

    (void)ctx;
    if (status != CLI_GO_ON)
        return status;
    return push(&agent.env, &agent.nenv, arg);
}

static int pass_env(const cli_command *cmd, const char *arg, void *ctx)
{
    const char *value = getenv(arg);
    char *kv;
    int status;

    (void)ctx;
    if (value == NULL)
        return cli_usage_error(cmd, "--pass-env %s: the variable is not set", arg);
    kv = malloc(strlen(arg) + strlen(value) + 2);
    if (kv == NULL)
        return cli_out_of_memory();
    sprintf(kv, "%s=%s", arg, value);
    status = push(&agent.owned, &agent.nowned, kv);
    if (status != CLI_GO_ON) {
        free(kv);
        return status;
    }
    return push(&agent.env, &agent.nenv, kv);
}

static int agent_main(int argc, char **argv)
{
    const cli_option extra[] = {
        { "harness", 0, 1, NULL, set_harness },
        { "model", 0, 1, NULL, set_model },
        { "arg", 0, 1, NULL, add_arg },
        { "agent-env", 0, 1, NULL, add_agent_env },
        { "pass-env", 0, 1, NULL, pass_env },
        { "json", 0, 0, &agent.json, NULL },
        { NULL, 0, 0, NULL, NULL }
    };
    const char *backend = cli_default_backend();
    sbx_options *options = cli_options_new();
    sbx_agent_request req = SBX_AGENT_REQUEST_INIT;
    sbx_agent_run *run = NULL;
    cli_oneshot what = { 0 };
    int status;

    if (options == NULL)
        return CLI_EXIT_TOOL;
    agent.harness = SBX_AGENT_CLAUDE_CODE;
    status = cli_parse_creation_options_extra(&cli_command_agent, argc, argv, options,
                                              &backend, extra);
    if (status == CLI_GO_ON && optind >= argc)
        status = cli_usage_error(&cli_command_agent, "no prompt given");
    if (status == CLI_GO_ON && optind + 1 < argc)
        status = cli_usage_error(&cli_command_agent,
                                 "unexpected argument \"%s\" after the prompt (pass the "
                                 "prompt as one argument)", argv[optind + 1]);
    if (status == CLI_GO_ON) {
        req.harness = agent.harness;
        req.prompt = argv[optind];
        req.model = agent.model;
        req.extra_args = agent.args;
        req.env = agent.env;
        what.agent = &req;
        what.agent_run = &run;
        status = cli_oneshot_run(backend, options, &what);
    }
    if (status == 0 && run != NULL) {
        if (agent.json) {
            char *text = sbx_agent_run_to_json(run);
            json_object *doc = text ? json_tokener_parse(text) : NULL;

            free(text);
            if (doc == NULL)
                status = cli_out_of_memory();
            else
                cli_print_json(doc);
        } else if (sbx_agent_run_get_status(run) == SBX_AGENT_SUCCEEDED) {
            const char *t = sbx_agent_run_get0_text(run);
            size_t n = strlen(t);

            fwrite(t, 1, n, stdout);
            if (n == 0 || t[n - 1] != '\n')
                putchar('\n');
        }
        if (status == 0 && sbx_agent_run_get_status(run) != SBX_AGENT_SUCCEEDED) {
            cli_msg("the agent run failed: %s [code=%s]", sbx_agent_run_get0_reason(run),
                    sbx_error_code_name(sbx_agent_run_get_error_code(run)));
            status = 1;
        }
    }
    sbx_agent_run_free(run);
    for (size_t i = 0; i < agent.nowned; i++)
        free((char *)agent.owned[i]);
    free(agent.owned);
    free(agent.env);
    free(agent.args);
    sbx_options_free(options);
    return status;
}

const cli_command cli_command_agent = {
    "agent", "agent [OPTION]... PROMPT",
    "run one agent call (claude-code, codex, opencode) in a\nnew sandbox",
    agent_main, usage
};
