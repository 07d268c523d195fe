/*
 * Making sandboxes (cli.h): the creation options that run and create
 * share, and the one-shot sandbox of run and exec-code, destroyed before
 * sbx exits: also on errors and on SIGINT, SIGTERM and SIGHUP. The command
 * runs on a worker thread so the main thread can destroy the sandbox
 * (which ends the command) while it runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------ creation options */

/* What parsing the creation options gathers besides what it sets at once. */
typedef struct creation_ctx {
    cli_creation base;
    cli_terminal *term;          /* run: -i and -t; NULL for create */
    const char *git_repo, *git_ref;
    json_object *backend_opts;   /* --opt */
    sbx_manifest *files;         /* --file */
} creation_ctx;

/* The options a handler of the creation options sets. */
#define OPTIONS(ctx) (((cli_creation *)(ctx))->options)

/* CLI_GO_ON when an sbx_options setter returned @rc 0, else CLI_EXIT_TOOL
 * after reporting *@error (read after the setter ran). */
static int setter_status(int rc, sbx_error **error)
{
    if (rc == 0)
        return CLI_GO_ON;
    cli_error(*error);
    return CLI_EXIT_TOOL;
}

int cli_set_backend(const cli_command *cmd, const char *arg, void *ctx)
{
    *((cli_creation *)ctx)->backend = arg;
    return CLI_GO_ON;
}

static int set_env(const cli_command *cmd, const char *arg, void *ctx)
{
    creation_ctx *c = ctx;
    sbx_error *error = NULL;
    char *key;
    int rc = cli_env_arg(cmd, arg, &arg);

    if (rc != CLI_GO_ON || arg == NULL)
        return rc;
    key = strndup(arg, (size_t)(strchr(arg, '=') - arg));
    if (key == NULL)
        return cli_out_of_memory();
    rc = sbx_options_set_env(c->base.options, key, strchr(arg, '=') + 1, &error);
    free(key);
    return setter_status(rc, &error);
}

static int set_workdir(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;

    return setter_status(sbx_options_set_workdir(OPTIONS(ctx), arg, &error), &error);
}

/* Parses @arg, the value of @option, as a number > 0 and gives it to
 * @setter. */
static int set_positive(const cli_command *cmd, const char *option, const char *unit,
                        const char *arg, void *ctx,
                        int (*setter)(sbx_options *, double, sbx_error **))
{
    sbx_error *error = NULL;
    double v;
    int rc = cli_parse_positive(cmd, option, arg, unit, &v);

    if (rc != CLI_GO_ON)
        return rc;
    return setter_status(setter(OPTIONS(ctx), v, &error), &error);
}

int cli_set_timeout(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;
    const char *otherwise = NULL;
    double v;
    int rc;

    if (cmd == &cli_command_run)
        otherwise = "for no lifetime, --no-lifetime (local, bubblewrap, safehouse: the "
                    "sandbox then ends with sbx)";
    else if (cmd == &cli_command_create)
        otherwise = "a sandbox of create outlives sbx, so it needs a lifetime (`sbx run "
                    "--no-lifetime` runs a command in a sandbox without one)";
    rc = cli_parse_positive_or(cmd, "--timeout", arg, "seconds", otherwise, &v);
    if (rc != CLI_GO_ON)
        return rc;
    return setter_status(sbx_options_set_timeout_secs(OPTIONS(ctx), v, &error), &error);
}

int cli_creation_no_lifetime;

/* --no-lifetime (run): no lifetime for the one-shot sandbox, which ends
 * with sbx (attached); the library refuses it where the backend cannot
 * end it then. */
static int set_no_lifetime(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)arg;
    (void)ctx;
    if (cmd == &cli_command_create)
        return cli_usage_error(cmd, "--no-lifetime is refused: a sandbox of create outlives "
                               "sbx (it is detached), and only its lifetime ends it; give "
                               "--timeout SECONDS, or use `sbx run --no-lifetime`, whose "
                               "sandbox ends with sbx");
    if (cmd != &cli_command_run)
        return cli_usage_error(cmd, "--no-lifetime is an option of `sbx run`");
    cli_creation_no_lifetime = 1;
    return CLI_GO_ON;
}

static int set_tty(const cli_command *cmd, const char *arg, void *ctx)
{
    ((creation_ctx *)ctx)->term->tty = 1;
    return CLI_GO_ON;
}

static int set_interactive(const cli_command *cmd, const char *arg, void *ctx)
{
    ((creation_ctx *)ctx)->term->interactive = 1;
    return CLI_GO_ON;
}

/* create: -t VALUE and -i VALUE are what the letters meant before. */
int cli_old_timeout_letter(const cli_command *cmd, const char *arg, void *ctx)
{
    return cli_usage_error(cmd, "-t is no longer the lifetime: the lifetime is now --timeout %s",
                           arg);
}

static int old_image_letter(const cli_command *cmd, const char *arg, void *ctx)
{
    return cli_usage_error(cmd, "-i is no longer the image: the image is now --image %s", arg);
}

static int set_cpu(const cli_command *cmd, const char *arg, void *ctx)
{
    return set_positive(cmd, "--cpu", "vCPUs", arg, ctx, sbx_options_set_cpu);
}

static int set_memory(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;
    int64_t mib;
    int rc = cli_parse_positive_int64(cmd, "--memory", arg, "MiB", &mib);

    if (rc != CLI_GO_ON)
        return rc;
    return setter_status(sbx_options_set_memory_mb(OPTIONS(ctx), mib, &error), &error);
}

static int set_git_repo(const cli_command *cmd, const char *arg, void *ctx)
{
    ((creation_ctx *)ctx)->git_repo = arg;
    return CLI_GO_ON;
}

static int set_git_ref(const cli_command *cmd, const char *arg, void *ctx)
{
    ((creation_ctx *)ctx)->git_ref = arg;
    return CLI_GO_ON;
}

static int set_image(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;

    return setter_status(sbx_options_set_image(OPTIONS(ctx), arg, &error), &error);
}

static int set_preset(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;

    return setter_status(sbx_options_set_preset(OPTIONS(ctx), arg, &error), &error);
}

static int set_no_internet(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_options_set_allow_internet(OPTIONS(ctx), 0, NULL);
    return CLI_GO_ON;
}

/*
 * Adds --opt KEY=VALUE to the JSON object of the backend options (made on
 * first use): VALUE is parsed as JSON when it is valid JSON, else kept as
 * a string.
 */
static int add_backend_option(const cli_command *cmd, const char *arg, void *ctx)
{
    creation_ctx *c = ctx;
    const char *eq = strchr(arg, '=');
    json_object *value;
    char *key;

    if (eq == NULL || eq == arg)
        return cli_usage_error(cmd, "invalid --opt value \"%s\": expected KEY=VALUE", arg);
    if (c->backend_opts == NULL && (c->backend_opts = json_object_new_object()) == NULL)
        return cli_out_of_memory();
    /* json-c parses "null" to NULL, which stores a JSON null: right. */
    value = json_tokener_parse(eq + 1);
    if (value == NULL && strcmp(eq + 1, "null") != 0)
        value = json_object_new_string(eq + 1);
    key = strndup(arg, (size_t)(eq - arg));
    if (key == NULL) {
        json_object_put(value);
        return cli_out_of_memory();
    }
    json_object_object_add(c->backend_opts, key, value);
    free(key);
    return CLI_GO_ON;
}

/* Adds --file LOCAL:PATH to the workspace manifest (made on first use) as a
 * host file entry. */
static int add_file_option(const cli_command *cmd, const char *arg, void *ctx)
{
    creation_ctx *c = ctx;
    const char *colon = strrchr(arg, ':');
    sbx_error *error = NULL;
    char *local;

    if (colon == NULL || colon == arg || colon[1] == '\0')
        return cli_usage_error(cmd, "invalid --file value \"%s\": expected LOCAL:SANDBOX_PATH",
                               arg);
    if (c->files == NULL && (c->files = sbx_manifest_new()) == NULL)
        return cli_out_of_memory();
    local = strndup(arg, (size_t)(colon - arg));
    if (local == NULL)
        return cli_out_of_memory();
    if (access(local, R_OK) != 0) {
        cli_msg("--file %s: cannot read %s: %s", arg, local, strerror(errno));
        free(local);
        return CLI_EXIT_TOOL;
    }
    if (sbx_manifest_add_local_file(c->files, colon + 1, local, &error) < 0) {
        free(local);
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    free(local);
    return CLI_GO_ON;
}

/* -v: the preset setup commands' output is shown too. */
static int show_setup_output;

/*
 * The progress of a create on stderr (sbx_options_set_progress): each
 * preset setup command as it starts and, when it ends, how long it took
 * or how it failed; with -v its output as it comes.
 */
static void print_progress(const sbx_progress *p, void *user_data)
{
    static int mid_line;        /* -v output so far did not end a line */

    if (p->step == NULL || strcmp(p->step, "preset_setup") != 0)
        return;
    switch (p->event) {
    case SBX_PROGRESS_STEP_START:
        cli_msg("preset %s: step %zu/%zu: %s", p->name, p->index, p->count, p->command);
        break;
    case SBX_PROGRESS_STEP_OUTPUT:
        if (*(const int *)user_data && p->len > 0) {
            fwrite(p->data, 1, p->len, stderr);
            mid_line = ((const char *)p->data)[p->len - 1] != '\n';
        }
        break;
    case SBX_PROGRESS_STEP_END:
        if (mid_line)
            fputc('\n', stderr);   /* sbx's line starts a line of its own */
        mid_line = 0;
        if (p->exit_code == 0)
            cli_msg("preset %s: step %zu/%zu done in %.1f s", p->name, p->index, p->count,
                    p->duration_secs);
        else if (p->exit_code < 0)
            cli_msg("preset %s: step %zu/%zu did not finish (after %.1f s)", p->name, p->index,
                    p->count, p->duration_secs);
        else
            cli_msg("preset %s: step %zu/%zu failed with exit code %d%s after %.1f s", p->name,
                    p->index, p->count, p->exit_code, p->timed_out ? " (timed out)" : "",
                    p->duration_secs);
        break;
    }
    fflush(stderr);
}

static int set_verbose(const cli_command *cmd, const char *arg, void *ctx)
{
    show_setup_output = 1;
    return CLI_GO_ON;
}

const char *cli_creation_name;
const char *cli_run_user;

/* -u USER (run): the user the command runs as. */
static int set_user(const cli_command *cmd, const char *arg, void *ctx)
{
    cli_run_user = arg;
    return CLI_GO_ON;
}

/* create: -u USER is the sandbox's default user (sbx_options_set_user). */
static int user_for_create(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;

    (void)cmd;
    return setter_status(sbx_options_set_user(OPTIONS(ctx), arg, &error), &error);
}

/* -p PORT: a sandbox port exposed to this host. */
static int add_port(const cli_command *cmd, const char *arg, void *ctx)
{
    sbx_error *error = NULL;
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(arg, &end, 10);
    if (*arg < '0' || *arg > '9' || *end != '\0' || errno != 0 || v < 1 || v > 65535)
        return cli_usage_error(cmd, "invalid -p value \"%s\": expected a TCP port number "
                               "1..65535", arg);
    return setter_status(sbx_options_add_port(OPTIONS(ctx), (unsigned)v, &error), &error);
}

/* --name: kept for create, which records it; the one-shot sandbox of run
 * is never recorded, so a name could not be used. */
static int set_name(const cli_command *cmd, const char *arg, void *ctx)
{
    if (cmd != &cli_command_create)
        return cli_usage_error(cmd, "--name is for `sbx create`: the sandbox of %s is not "
                               "recorded", cmd->name);
    cli_creation_name = arg;
    return CLI_GO_ON;
}

/* --rm: docker's "remove the container when it exits". The sandbox of run,
 * exec-code and agent is always destroyed when its command ends, so it is
 * accepted and changes nothing; create's sandbox outlives sbx, so there it
 * is an error. */
static int set_rm(const cli_command *cmd, const char *arg, void *ctx)
{
    (void)arg;
    (void)ctx;
    if (cmd == &cli_command_create)
        return cli_usage_error(cmd, "--rm is for `sbx run`: a created sandbox stays until "
                               "`sbx rm ID` (or its --timeout)");
    return CLI_GO_ON;
}

/* 1 when @arg has the shape of docker's -v value, SOURCE:/TARGET[:MODE]
 * (a command or an operand of sbx has no such shape). */
static int is_volume_spec(const char *arg)
{
    const char *colon = strchr(arg, ':');

    return colon != NULL && colon != arg && colon[1] == '/';
}

/* The creation options, run's or create's letters, and @extra. */
static int parse_creation(const cli_command *cmd, int argc, char **argv, sbx_options *options,
                          const char **backend, cli_terminal *term, const cli_option *extra)
{
    static const cli_option table[] = {
        { "backend", 'b', 1, NULL, cli_set_backend },
        { "env", 'e', 1, NULL, set_env },
        { "workdir", 'w', 1, NULL, set_workdir },
        { "timeout", 0, 1, NULL, cli_set_timeout },
        { "cpu", 0, 1, NULL, set_cpu },
        { "memory", 0, 1, NULL, set_memory },
        { "git-repo", 0, 1, NULL, set_git_repo },
        { "git-ref", 0, 1, NULL, set_git_ref },
        { "image", 0, 1, NULL, set_image },
        { "preset", 0, 1, NULL, set_preset },
        { "no-internet", 0, 0, NULL, set_no_internet },
        { "no-lifetime", 0, 0, NULL, set_no_lifetime },
        { "opt", 0, 1, NULL, add_backend_option },
        { "file", 0, 1, NULL, add_file_option },
        { "verbose", 'v', 0, NULL, set_verbose },
        { "name", 0, 1, NULL, set_name },
        { "publish", 'p', 1, NULL, add_port },
    };
    /* run: -t and -i as docker's; create: the letters' old meanings are
     * errors naming the new options. */
    static const cli_option run_letters[] = {
        { "tty", 't', 0, NULL, set_tty },
        { "interactive", 'i', 0, NULL, set_interactive },
        { "user", 'u', 1, NULL, set_user },
        { "rm", 0, 0, NULL, set_rm },
    };
    static const cli_option create_letters[] = {
        { NULL, 't', 1, NULL, cli_old_timeout_letter },
        { NULL, 'i', 1, NULL, old_image_letter },
        { "user", 'u', 1, NULL, user_for_create },
        { "rm", 0, 0, NULL, set_rm },
    };
    _Static_assert(sizeof run_letters == sizeof create_letters, "one size for both");
    cli_option all[sizeof table / sizeof table[0] + sizeof run_letters / sizeof run_letters[0]
                   + 7];
    creation_ctx c = { { options, backend }, term, NULL, NULL, NULL, NULL };
    sbx_error *error = NULL;
    size_t n = sizeof table / sizeof table[0], k = 0;
    int status;

    memcpy(all, table, sizeof table);
    memcpy(all + n, term != NULL ? run_letters : create_letters, sizeof run_letters);
    n += sizeof run_letters / sizeof run_letters[0];
    for (; extra != NULL && k < 7 && (extra[k].name != NULL || extra[k].letter != 0); k++)
        all[n++] = extra[k];
    memset(all + n, 0, sizeof all[0]);
    status = cli_check_old_letters(cmd, argc, argv, term != NULL ? "lifetime" : NULL);
    if (status == CLI_GO_ON)
        status = cli_parse_options(cmd, argc, argv, all, &c);
    if (status == CLI_GO_ON && optind > 1 && optind < argc &&
        strcmp(argv[optind - 1], "-v") == 0 && is_volume_spec(argv[optind]))
        status = cli_usage_error(cmd, "-v is --verbose (the preset setup's output), not "
                                 "docker's volume: \"%s\" is not mounted; copy a file in "
                                 "with --file LOCAL:SANDBOX_PATH, a directory with `sbx cp "
                                 "-r` into a created sandbox", argv[optind]);

    if (status == CLI_GO_ON)
        sbx_options_set_progress(options, print_progress, &show_setup_output, NULL);
    if (status == CLI_GO_ON && c.backend_opts != NULL &&
        sbx_options_set_backend_options(options, json_object_to_json_string(c.backend_opts),
                                        &error) < 0) {
        cli_error(error);
        status = CLI_EXIT_TOOL;
    }
    if (status == CLI_GO_ON && c.files != NULL &&
        sbx_options_set_workspace(options, c.files, &error) < 0) {
        cli_error(error);
        status = CLI_EXIT_TOOL;
    }
    json_object_put(c.backend_opts);
    sbx_manifest_free(c.files); /* the options keep their own reference */
    if (status != CLI_GO_ON)
        return status;
    if (c.git_ref != NULL && c.git_repo == NULL)
        return cli_usage_error(cmd, "--git-ref needs --git-repo");
    if (c.git_repo != NULL &&
        sbx_options_set_git_repo(options, c.git_repo, c.git_ref, &error) < 0) {
        cli_error(error);
        return CLI_EXIT_TOOL;
    }
    *backend = cli_remote_backend(*backend);
    return CLI_GO_ON;
}

int cli_parse_creation_options(const cli_command *cmd, int argc, char **argv,
                               sbx_options *options, const char **backend, cli_terminal *term)
{
    return parse_creation(cmd, argc, argv, options, backend, term, NULL);
}

int cli_parse_creation_options_extra(const cli_command *cmd, int argc, char **argv,
                                     sbx_options *options, const char **backend,
                                     const cli_option *extra)
{
    return parse_creation(cmd, argc, argv, options, backend, NULL, extra);
}

sbx_options *cli_options_new(void)
{
    sbx_options *options = sbx_options_new();

    if (options == NULL)
        cli_out_of_memory();
    return options;
}

int cli_sandbox_destroy(sbx_sandbox *sandbox)
{
    sbx_error *error = NULL;

    if (sbx_sandbox_destroy(sandbox, &error) < 0) {
        cli_error(error);
        cli_msg("the sandbox %s may still exist", sbx_sandbox_get0_id(sandbox));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------- one-shot sandbox */

/* One exec, run on a worker thread. */
typedef struct exec_job {
    sbx_sandbox *sandbox;
    int destroyed;            /* by the main thread, on a stop signal */
    int finished;             /* the exec returned and the sandbox is intact */
    const cli_oneshot *what;
    double timeout;           /* the command's timeout (s); 0: the sandbox's */
    cli_sink sink;
    sbx_result *result;
    sbx_agent_run *run;       /* agent */
    sbx_error *error;
    int done_pipe[2];
} exec_job;

static void *exec_job_main(void *arg)
{
    exec_job *job = arg;
    sbx_exec_request request = SBX_EXEC_REQUEST_INIT;
    char c = 1;
    ssize_t n;

    request.timeout_secs = job->timeout;   /* 0: the sandbox's timeout_secs */
    request.on_output = cli_sink_output;
    request.user_data = &job->sink;
    request.flags = SBX_EXEC_NO_CAPTURE;
    if (job->what->agent != NULL) {
        sbx_agent_request agent = *job->what->agent;

        agent.timeout_secs = job->timeout;
        job->run = sbx_sandbox_run_agent(job->sandbox, &agent, &job->error);
    } else if (job->what->code != NULL) {
        job->result = sbx_sandbox_execute_code(job->sandbox, job->what->language,
                                               job->what->code, &request, &job->error);
    } else {
        request.argv = job->what->argv;
        request.user = job->what->user;
        job->result = sbx_sandbox_execute_command(job->sandbox, &request, &job->error);
    }
    do {
        n = write(job->done_pipe[1], &c, 1);
    } while (n < 0 && errno == EINTR);
    return NULL;
}

/* Waits for @job's worker or a stop signal; destroys the sandbox on a
 * signal. Returns 1 when it was destroyed so. */
static int wait_job(exec_job *job)
{
    int destroyed = 0, n;
    double waited = 0;

    for (;;) {
        struct pollfd pfd[2];

        pfd[0].fd = job->done_pipe[0];
        pfd[0].events = POLLIN;
        pfd[1].fd = cli_signal_fd();
        pfd[1].events = POLLIN;
        n = poll(pfd, 2, destroyed ? 1000 : (cli_signal_fd() < 0 ? 200 : -1));
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (pfd[0].revents & (POLLIN | POLLHUP)))
            break;
        if (n > 0 && (pfd[1].revents & POLLIN))
            cli_drain_fd(cli_signal_fd());
        if (cli_signal != 0 && !destroyed) {
            cli_msg("%s received; destroying the sandbox", cli_signal_name(cli_signal));
            cli_sandbox_destroy(job->sandbox);
            destroyed = 1;
        } else if (destroyed && n == 0) {
            waited += 1;
            if (waited >= CLI_SIGNAL_DRAIN_SECS) {
                /* The exec did not return although its sandbox is gone:
                 * leave without waiting for the worker. */
                cli_msg("the command did not end after the sandbox was destroyed");
                _exit(128 + cli_signal);
            }
        }
    }
    return destroyed;
}

/* Runs @job on a worker thread; returns the exit status. The sandbox is
 * the caller's to destroy unless job->destroyed says a stop signal did. */
static int run_job(exec_job *job)
{
    pthread_t thread;
    int rc;

    if (cli_signal != 0) {
        cli_msg("%s received; destroying the sandbox", cli_signal_name(cli_signal));
        return 128 + cli_signal;
    }
    if (pipe(job->done_pipe) < 0) {
        cli_msg("pipe: %s", strerror(errno));
        return CLI_EXIT_TOOL;
    }
    fcntl(job->done_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(job->done_pipe[1], F_SETFD, FD_CLOEXEC);
    rc = pthread_create(&thread, NULL, exec_job_main, job);
    if (rc != 0) {
        close(job->done_pipe[0]);
        close(job->done_pipe[1]);
        cli_msg("cannot start a thread: %s", strerror(rc));
        return CLI_EXIT_TOOL;
    }
    job->destroyed = wait_job(job);
    pthread_join(thread, NULL);
    close(job->done_pipe[0]);
    close(job->done_pipe[1]);
    if (job->destroyed) {
        /* The sandbox is gone: 128+N whatever the exec said. */
        sbx_result_free(job->result);
        sbx_agent_run_free(job->run);
        sbx_error_free(job->error);
        return 128 + cli_signal;
    }
    job->finished = 1;
    if (job->what->agent != NULL) {
        if (job->run == NULL) {
            cli_error(job->error);
            return CLI_EXIT_TOOL;
        }
        *job->what->agent_run = job->run;
        return 0;
    }
    return cli_exec_status(job->result, job->error);
}

int cli_oneshot_run(const char *backend, sbx_options *options, const cli_oneshot *what)
{
    exec_job job;
    sbx_error *error = NULL;
    int status;

    memset(&job, 0, sizeof job);
    job.what = what;
    job.timeout = sbx_options_get_timeout_secs(options);
    if (cli_creation_no_lifetime) {
        /* --timeout, when given, is the command's alone. */
        if (!sbx_options_is_set(options, SBX_OPTION_TIMEOUT_SECS))
            job.timeout = -1;
        sbx_options_set_timeout_secs(options, SBX_TIMEOUT_NONE, NULL);
    } else if (sbx_options_set_timeout_secs(options,
                                            job.timeout + CLI_ONESHOT_LIFETIME_GRACE_SECS,
                                            NULL) < 0) {
        job.timeout = 0;
    }
    job.sandbox = sbx_create(backend, options, &error);
    if (job.sandbox == NULL) {
        const char *option = sbx_error_get0_context(error, "option");
        int lifetime = option != NULL && strcmp(option, "timeout_secs") == 0;

        cli_error(error);
        /* The value refused is not the one given: say where it comes from. */
        if (lifetime && cli_creation_no_lifetime)
            cli_msg("--no-lifetime asked for no lifetime; give --timeout SECONDS instead");
        else if (lifetime && job.timeout > 0)
            cli_msg("the lifetime asked for was --timeout %.15g plus the %g s the sandbox "
                    "is kept past it, so that the timeout ends the command",
                    job.timeout, CLI_ONESHOT_LIFETIME_GRACE_SECS);
        return CLI_EXIT_TOOL;
    }
    if (what->term.interactive || what->term.tty) {
        /* On the main thread: its loop ends the command on a stop signal. */
        sbx_exec_request request = SBX_EXEC_REQUEST_INIT;

        request.argv = what->argv;
        request.user = what->user;
        request.timeout_secs = job.timeout;
        status = cli_terminal_exec(job.sandbox, &request, &what->term);
        cli_sandbox_destroy(job.sandbox);
        sbx_sandbox_free(job.sandbox);
        return status;
    }
    status = run_job(&job);
    if (!job.destroyed)
        cli_sandbox_destroy(job.sandbox);
    sbx_sandbox_free(job.sandbox);
    /* A stop signal while the command ended: 128+N all the same. */
    if (job.finished && cli_signal != 0)
        return 128 + cli_signal;
    return status;
}
