/*
 * sbx — run commands and code in sandboxes through libsbx.
 *
 *   sbx run [OPTION]... [--] COMMAND [ARG]...
 *   sbx exec-code [OPTION]... CODE
 *   sbx backends [--json]
 *
 * The command's output goes to stdout/stderr untouched, as it arrives. The
 * tool's own messages go to stderr as "sbx: MESSAGE [code=...]"; the tool's
 * own failures exit 125 (as `docker run` does), otherwise the exit status is
 * the command's (128+N for signal N, 124 on timeout).
 *
 * The sandbox is always destroyed before sbx exits: also on errors and on
 * SIGINT, SIGTERM and SIGHUP, whose handlers only set a flag and wake the
 * main thread; the command runs on a worker thread so the main thread can
 * destroy the sandbox (which ends the command) while it runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <sbx/sbx.h>

/* Exit status of the tool's own failures (bad usage, create failed, ...). */
#define EXIT_TOOL 125
/* How long to wait for a running exec to return once its sandbox has been
 * destroyed after a signal. */
#define SIGNAL_DRAIN_SECS 10

/* ------------------------------------------------------------------ util */

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void msg(const char *fmt, ...)
{
    va_list ap;
    char buf[4096];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sbx: %s\n", buf);
}

/* Prints @error as "sbx: MESSAGE [code=CODE, ...]" and frees it. */
static void msg_error(sbx_error *error)
{
    char *text;

    if (error == NULL) {
        msg("unknown error");
        return;
    }
    text = sbx_error_to_string(error);
    if (text != NULL) {
        fprintf(stderr, "sbx: %s\n", text);
        free(text);
    } else {
        fprintf(stderr, "sbx: %s [code=%s]\n", sbx_error_get0_message(error),
                sbx_error_code_name(sbx_error_get_code(error)));
    }
    sbx_error_free(error);
}

static int parse_positive_double(const char *text, double *out)
{
    char *end;
    double v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v <= 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_positive_int64(const char *text, int64_t *out)
{
    char *end;
    long long v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static const char *default_backend(void)
{
    const char *env = getenv("SBX_BACKEND");

    return env != NULL && *env != '\0' ? env : "local";
}

/* ----------------------------------------------------------------- signals */

static volatile sig_atomic_t g_signal;
static int g_signal_pipe[2] = { -1, -1 };

static void on_signal(int signo)
{
    int saved = errno;
    char c = 1;
    ssize_t n;

    if (g_signal == 0)
        g_signal = signo;
    if (g_signal_pipe[1] >= 0) {
        n = write(g_signal_pipe[1], &c, 1);
        (void)n;
    }
    errno = saved;
}

/* A handler rather than SIG_IGN: a caught signal is reset to the default in
 * the programs the library starts, an ignored one would be inherited. */
static void on_sigpipe(int signo)
{
}

static void install_signal_handlers(void)
{
    static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa, old;
    size_t i;

    if (pipe(g_signal_pipe) == 0) {
        for (i = 0; i < 2; i++) {
            fcntl(g_signal_pipe[i], F_SETFD, FD_CLOEXEC);
            fcntl(g_signal_pipe[i], F_SETFL, O_NONBLOCK);
        }
    } else {
        g_signal_pipe[0] = g_signal_pipe[1] = -1;
    }

    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_signal;
    for (i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++) {
        /* A signal ignored by whoever started us stays ignored. */
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);
}

static const char *signal_name(int signo)
{
    switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

/* ------------------------------------------------------------------ output */

/* Output sink: the command's chunks are written to our stdout / stderr as
 * they arrive. A stream whose reader went away is dropped from then on
 * (the command keeps running; its exit code still decides ours). */
typedef struct output_sink {
    int broken[3];
} output_sink;

static void write_all(output_sink *sink, int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0 && !sink->broken[fd]) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            sink->broken[fd] = 1;
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

static void on_output(sbx_stream stream, const void *data, size_t len,
                      void *user_data)
{
    output_sink *sink = user_data;

    write_all(sink, stream == SBX_STREAM_STDERR ? STDERR_FILENO : STDOUT_FILENO,
              data, len);
}

/* --------------------------------------------------------------- exec job */

/* One exec, run on a worker thread. */
typedef struct exec_job {
    sbx_sandbox *sandbox;
    const char *const *argv;  /* run: the command */
    const char *language;     /* exec-code */
    const char *code;         /* exec-code: non-NULL selects execute_code */
    output_sink sink;
    sbx_result *result;
    sbx_error *error;
    int done_pipe[2];
} exec_job;

static void *exec_job_main(void *arg)
{
    exec_job *job = arg;
    sbx_exec_request request = SBX_EXEC_REQUEST_INIT;
    char c = 1;
    ssize_t n;

    request.timeout_secs = 0;   /* the sandbox's timeout_secs */
    request.on_output = on_output;
    request.user_data = &job->sink;
    request.flags = SBX_EXEC_NO_CAPTURE;
    if (job->code != NULL) {
        job->result = sbx_sandbox_execute_code(job->sandbox, job->language,
                                               job->code, &request, &job->error);
    } else {
        request.argv = job->argv;
        job->result = sbx_sandbox_execute_command(job->sandbox, &request,
                                                  &job->error);
    }
    do {
        n = write(job->done_pipe[1], &c, 1);
    } while (n < 0 && errno == EINTR);
    return NULL;
}

static void drain_fd(int fd)
{
    char buf[64];

    while (read(fd, buf, sizeof buf) > 0)
        ;
}

/* Destroys @sandbox; reports a failure. Returns 0 or -1. */
static int destroy_sandbox(sbx_sandbox *sandbox)
{
    sbx_error *error = NULL;

    if (sbx_sandbox_destroy(sandbox, &error) < 0) {
        msg_error(error);
        msg("the sandbox %s may still exist", sbx_sandbox_get0_id(sandbox));
        return -1;
    }
    return 0;
}

/*
 * Runs @job on a worker thread while the main thread waits for it or for a
 * stop signal. Destroys and frees the sandbox in every case and returns the
 * exit status for the tool.
 */
static int run_job_and_destroy(exec_job *job)
{
    pthread_t thread;
    int destroyed = 0, status, rc;
    double waited = 0;

    if (g_signal != 0) {
        msg("%s received; destroying the sandbox", signal_name(g_signal));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return 128 + g_signal;
    }

    if (pipe(job->done_pipe) < 0) {
        msg("pipe: %s", strerror(errno));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return EXIT_TOOL;
    }
    fcntl(job->done_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(job->done_pipe[1], F_SETFD, FD_CLOEXEC);

    rc = pthread_create(&thread, NULL, exec_job_main, job);
    if (rc != 0) {
        msg("cannot start a thread: %s", strerror(rc));
        destroy_sandbox(job->sandbox);
        sbx_sandbox_free(job->sandbox);
        return EXIT_TOOL;
    }

    for (;;) {
        struct pollfd pfd[2];
        int n;

        pfd[0].fd = job->done_pipe[0];
        pfd[0].events = POLLIN;
        pfd[1].fd = g_signal_pipe[0];
        pfd[1].events = POLLIN;
        n = poll(pfd, 2, destroyed ? 1000 : (g_signal_pipe[0] < 0 ? 200 : -1));
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (pfd[0].revents & (POLLIN | POLLHUP)))
            break;
        if (n > 0 && (pfd[1].revents & POLLIN))
            drain_fd(g_signal_pipe[0]);
        if (g_signal != 0 && !destroyed) {
            msg("%s received; destroying the sandbox", signal_name(g_signal));
            destroy_sandbox(job->sandbox);
            destroyed = 1;
        } else if (destroyed && n == 0) {
            waited += 1;
            if (waited >= SIGNAL_DRAIN_SECS) {
                /* The exec did not return although its sandbox is gone:
                 * leave without waiting for the worker. */
                msg("the command did not end after the sandbox was destroyed");
                _exit(128 + g_signal);
            }
        }
    }
    pthread_join(thread, NULL);
    close(job->done_pipe[0]);
    close(job->done_pipe[1]);

    if (destroyed) {
        sbx_result_free(job->result);
        sbx_error_free(job->error);
        sbx_sandbox_free(job->sandbox);
        return 128 + g_signal;
    }

    if (job->result == NULL) {
        msg_error(job->error);
        job->error = NULL;
        status = EXIT_TOOL;
    } else {
        status = sbx_result_get_exit_code(job->result);
        if (sbx_result_is_timed_out(job->result))
            msg("the command timed out and was killed");
        sbx_result_free(job->result);
    }
    destroy_sandbox(job->sandbox);
    sbx_sandbox_free(job->sandbox);
    if (g_signal != 0)
        return 128 + g_signal;
    return status;
}

/* ------------------------------------------------------------------ help */

static void usage_main(FILE *out)
{
    fprintf(out,
"Usage: sbx COMMAND [OPTION]...\n"
"\n"
"Run commands and code in sandboxes through libsbx.\n"
"\n"
"Commands:\n"
"  run [OPTION]... [--] COMMAND [ARG]...\n"
"                     create a sandbox, run COMMAND in it, destroy it\n"
"  exec-code [OPTION]... CODE\n"
"                     run a snippet of code (python by default) in a new sandbox\n"
"  backends [--json]  list the backend plugins found and their capabilities\n"
"  help [COMMAND]     show this help, or the help of COMMAND\n"
"\n"
"Options:\n"
"  -h, --help         show this help and exit\n"
"  -V, --version      print the version and exit\n"
"\n"
"The backend is \"local\" unless the environment variable SBX_BACKEND names\n"
"another; -b BACKEND overrides both. A backend NAME is the plugin\n"
"libsbx-NAME.so, searched in the directories of SBX_PLUGIN_PATH, then in\n"
"%s.\n"
"\n"
"Exit status: the command's own (128+N when it was killed by signal N, 124\n"
"when it timed out); 125 when sbx itself failed (bad usage, missing backend,\n"
"sandbox creation failed).\n",
            sbx_plugin_dir());
}

static void usage_run(FILE *out)
{
    fprintf(out,
"Usage: sbx run [OPTION]... [--] COMMAND [ARG]...\n"
"\n"
"Create a sandbox, run COMMAND with its arguments in it (as an argument\n"
"vector, not through a shell), stream its output, destroy the sandbox and exit\n"
"with the command's exit status.\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable in the sandbox\n"
"                          (repeatable; VALUE is taken literally)\n"
"  -w, --workdir=DIR       directory the command starts in (on local: an\n"
"                          existing directory used as the sandbox root, and\n"
"                          never deleted)\n"
"  -t, --timeout=SECONDS   sandbox lifetime and command timeout (default %g)\n"
"      --cpu=N             vCPUs (fractions allowed)\n"
"      --memory=MIB        memory in MiB\n"
"      --git-repo=URL      clone URL (a local path works) into the sandbox's\n"
"                          working directory, under its last path component\n"
"      --git-ref=REF       branch or tag to clone (with --git-repo)\n"
"  -h, --help              show this help and exit\n"
"\n"
"The command's standard input is empty (it reads end of file at once): sbx\n"
"does not pass its own standard input on. Options after COMMAND belong to\n"
"the command. The sandbox is destroyed when the command ends, when sbx fails\n"
"and when sbx receives SIGINT, SIGTERM or SIGHUP.\n"
"\n"
"Exit status: the command's (128+N when killed by signal N, 124 when it\n"
"timed out and its processes were killed); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

static void usage_exec_code(FILE *out)
{
    fprintf(out,
"Usage: sbx exec-code [OPTION]... CODE\n"
"\n"
"Create a sandbox, run CODE in it, stream its output, destroy the sandbox and\n"
"exit with the interpreter's exit status. CODE \"-\" reads the code from\n"
"standard input. The code's own standard input is empty.\n"
"\n"
"  -b, --backend=BACKEND    backend to use (default: $SBX_BACKEND, else local)\n"
"  -l, --language=LANGUAGE  python (default), bash, sh, node or javascript\n"
"  -t, --timeout=SECONDS    sandbox lifetime and code timeout (default %g)\n"
"  -h, --help               show this help and exit\n"
"\n"
"Exit status: the interpreter's (128+N when killed by signal N, 124 when it\n"
"timed out); 125 when sbx itself failed.\n",
            SBX_DEFAULT_TIMEOUT_SECS);
}

static void usage_backends(FILE *out)
{
    fprintf(out,
"Usage: sbx backends [--json]\n"
"\n"
"List the backend plugins found (SBX_PLUGIN_PATH, then %s):\n"
"name, version, status (\"ok\" or why the plugin is not used), the\n"
"capabilities it declares and, for a usable one, the capabilities a client\n"
"actually has on this host.\n"
"\n"
"      --json   print a JSON array of objects {name, path, version,\n"
"               description, abi, usable, problem, caps, probed_caps,\n"
"               probe_error}\n"
"  -h, --help   show this help and exit\n",
            sbx_plugin_dir());
}

/* Reports bad usage of command @cmd ("" for sbx itself); returns 125. */
static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    char buf[4096];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sbx: %s\n", buf);
    fprintf(stderr, "sbx: see 'sbx %s%s--help'\n", cmd, *cmd ? " " : "");
    return EXIT_TOOL;
}

/* Reports an option getopt refused. */
static int bad_option(const char *cmd, char **argv, int opt)
{
    const char *arg = argv[optind - 1];

    if (opt == ':')
        return usage_error(cmd, "option \"%s\" needs a value", arg);
    if (optopt != 0 && strncmp(arg, "--", 2) != 0)
        return usage_error(cmd, "unknown option \"-%c\"", optopt);
    return usage_error(cmd, "unknown option \"%s\"", arg);
}

/* ---------------------------------------------------------- create sandbox */

/* Creates the sandbox; reports a failure and returns NULL. */
static sbx_sandbox *create_sandbox(const char *backend, const sbx_options *options)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox = sbx_create(backend, options, &error);

    if (sandbox == NULL)
        msg_error(error);
    return sandbox;
}

/* ------------------------------------------------------------------- run */

enum {
    OPT_CPU = 256,
    OPT_MEMORY,
    OPT_GIT_REPO,
    OPT_GIT_REF,
    OPT_JSON
};

static int cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "env", required_argument, NULL, 'e' },
        { "workdir", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 't' },
        { "cpu", required_argument, NULL, OPT_CPU },
        { "memory", required_argument, NULL, OPT_MEMORY },
        { "git-repo", required_argument, NULL, OPT_GIT_REPO },
        { "git-ref", required_argument, NULL, OPT_GIT_REF },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *backend = default_backend();
    const char *git_repo = NULL, *git_ref = NULL;
    sbx_options *options;
    sbx_error *error = NULL;
    exec_job job;
    int opt, status = EXIT_TOOL;

    options = sbx_options_new();
    if (options == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:b:e:w:t:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            backend = optarg;
            break;
        case 'e': {
            const char *eq = strchr(optarg, '=');
            char *key;

            if (eq == NULL || eq == optarg) {
                status = usage_error("run",
                                     "invalid -e value \"%s\": expected KEY=VALUE",
                                     optarg);
                goto out;
            }
            key = strndup(optarg, (size_t)(eq - optarg));
            if (key == NULL) {
                msg("out of memory");
                goto out;
            }
            if (sbx_options_set_env(options, key, eq + 1, &error) < 0) {
                free(key);
                msg_error(error);
                goto out;
            }
            free(key);
            break;
        }
        case 'w':
            if (sbx_options_set_workdir(options, optarg, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        case 't': {
            double secs;

            if (parse_positive_double(optarg, &secs) < 0) {
                status = usage_error("run", "invalid -t value \"%s\"", optarg);
                goto out;
            }
            if (sbx_options_set_timeout_secs(options, secs, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        }
        case OPT_CPU: {
            double cpu;

            if (parse_positive_double(optarg, &cpu) < 0) {
                status = usage_error("run", "invalid --cpu value \"%s\"", optarg);
                goto out;
            }
            if (sbx_options_set_cpu(options, cpu, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        }
        case OPT_MEMORY: {
            int64_t mib;

            if (parse_positive_int64(optarg, &mib) < 0) {
                status = usage_error("run", "invalid --memory value \"%s\"",
                                     optarg);
                goto out;
            }
            if (sbx_options_set_memory_mb(options, mib, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        }
        case OPT_GIT_REPO:
            git_repo = optarg;
            break;
        case OPT_GIT_REF:
            git_ref = optarg;
            break;
        case 'h':
            usage_run(stdout);
            status = 0;
            goto out;
        default:
            status = bad_option("run", argv, opt);
            goto out;
        }
    }
    if (git_ref != NULL && git_repo == NULL) {
        status = usage_error("run", "--git-ref needs --git-repo");
        goto out;
    }
    if (git_repo != NULL &&
        sbx_options_set_git_repo(options, git_repo, git_ref, &error) < 0) {
        msg_error(error);
        goto out;
    }
    if (optind >= argc) {
        status = usage_error("run", "no command given");
        goto out;
    }

    memset(&job, 0, sizeof job);
    job.argv = (const char *const *)(argv + optind);
    job.sandbox = create_sandbox(backend, options);
    if (job.sandbox == NULL)
        goto out;
    sbx_options_free(options);
    return run_job_and_destroy(&job);

out:
    sbx_options_free(options);
    return status;
}

/* ------------------------------------------------------------- exec-code */

/* Reads all of standard input into a NUL-terminated string. */
static char *read_stdin(void)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);

    if (buf == NULL)
        return NULL;
    for (;;) {
        ssize_t n;

        if (cap - len < 2) {
            char *bigger = realloc(buf, cap * 2);

            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        n = read(STDIN_FILENO, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            msg("cannot read the code from standard input: %s", strerror(errno));
            free(buf);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        msg("the code read from standard input contains a NUL byte");
        free(buf);
        return NULL;
    }
    return buf;
}

static int cmd_exec_code(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "language", required_argument, NULL, 'l' },
        { "timeout", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *backend = default_backend();
    const char *language = NULL;
    char *code_buf = NULL;
    sbx_options *options;
    sbx_error *error = NULL;
    exec_job job;
    int opt, status = EXIT_TOOL;

    options = sbx_options_new();
    if (options == NULL) {
        msg("out of memory");
        return EXIT_TOOL;
    }
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:b:l:t:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            backend = optarg;
            break;
        case 'l':
            language = optarg;
            break;
        case 't': {
            double secs;

            if (parse_positive_double(optarg, &secs) < 0) {
                status = usage_error("exec-code", "invalid -t value \"%s\"",
                                     optarg);
                goto out;
            }
            if (sbx_options_set_timeout_secs(options, secs, &error) < 0) {
                msg_error(error);
                goto out;
            }
            break;
        }
        case 'h':
            usage_exec_code(stdout);
            status = 0;
            goto out;
        default:
            status = bad_option("exec-code", argv, opt);
            goto out;
        }
    }
    if (optind >= argc) {
        status = usage_error("exec-code", "no code given");
        goto out;
    }
    if (optind + 1 < argc) {
        status = usage_error("exec-code",
                             "unexpected argument \"%s\" after the code "
                             "(pass the code as one argument)", argv[optind + 1]);
        goto out;
    }

    memset(&job, 0, sizeof job);
    if (strcmp(argv[optind], "-") == 0) {
        code_buf = read_stdin();
        if (code_buf == NULL)
            goto out;
        job.code = code_buf;
    } else {
        job.code = argv[optind];
    }
    job.language = language;
    job.sandbox = create_sandbox(backend, options);
    if (job.sandbox == NULL)
        goto out;
    status = run_job_and_destroy(&job);

out:
    free(code_buf);
    sbx_options_free(options);
    return status;
}

/* -------------------------------------------------------------- backends */

/* Capability names of @caps, space-separated, in a new string. */
static char *caps_to_string(uint64_t caps)
{
    size_t cap = 64 * 24 + 1, len = 0;
    char *out;
    unsigned bit;

    out = malloc(cap);
    if (out == NULL)
        return NULL;
    out[0] = '\0';
    for (bit = 0; bit < 64; bit++) {
        uint64_t b = UINT64_C(1) << bit;
        const char *name;
        int n;

        if (!(caps & b))
            continue;
        name = sbx_capability_name(b);
        if (name != NULL)
            n = snprintf(out + len, cap - len, "%s%s", len ? " " : "", name);
        else
            n = snprintf(out + len, cap - len, "%sbit%u", len ? " " : "", bit);
        if (n > 0)
            len += (size_t)n;
    }
    return out;
}

static json_object *caps_to_json(uint64_t caps)
{
    json_object *array = json_object_new_array();
    unsigned bit;

    for (bit = 0; bit < 64; bit++) {
        uint64_t b = UINT64_C(1) << bit;
        const char *name;
        char other[16];

        if (!(caps & b))
            continue;
        name = sbx_capability_name(b);
        if (name == NULL) {
            snprintf(other, sizeof other, "bit%u", bit);
            name = other;
        }
        json_object_array_add(array, json_object_new_string(name));
    }
    return array;
}

typedef struct backend_row {
    const sbx_backend_info *info;
    int usable;
    int probed;          /* probe succeeded */
    uint64_t probed_caps;
    char *probe_error;   /* message when the client or the probe failed */
} backend_row;

static void probe_backend(backend_row *row)
{
    sbx_error *error = NULL;
    sbx_client *client;

    client = sbx_client_new(sbx_backend_info_get0_name(row->info), &error);
    if (client != NULL && sbx_client_probe(client, &row->probed_caps, &error) == 0)
        row->probed = 1;
    if (!row->probed) {
        row->probe_error = error != NULL ? sbx_error_to_string(error)
                                         : strdup("probe failed");
        sbx_error_free(error);
    }
    sbx_client_free(client);
}

static void print_backends_json(backend_row *rows, size_t count)
{
    json_object *array = json_object_new_array();
    size_t i;

    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *problem = sbx_backend_info_get0_problem(info);
        unsigned major = sbx_backend_info_get_abi_major(info);
        unsigned minor = sbx_backend_info_get_abi_minor(info);
        json_object *o = json_object_new_object();
        char abi[32];

        json_object_object_add(o, "name",
                               json_object_new_string(sbx_backend_info_get0_name(info)));
        json_object_object_add(o, "path",
                               json_object_new_string(sbx_backend_info_get0_path(info)));
        json_object_object_add(o, "version",
                               json_object_new_string(sbx_backend_info_get0_version(info)));
        json_object_object_add(o, "description",
                               json_object_new_string(sbx_backend_info_get0_description(info)));
        if (major == 0 && minor == 0) {
            json_object_object_add(o, "abi", NULL);
        } else {
            snprintf(abi, sizeof abi, "%u.%u", major, minor);
            json_object_object_add(o, "abi", json_object_new_string(abi));
        }
        json_object_object_add(o, "usable", json_object_new_boolean(rows[i].usable));
        json_object_object_add(o, "problem",
                               problem != NULL ? json_object_new_string(problem) : NULL);
        json_object_object_add(o, "caps", caps_to_json(sbx_backend_info_get_caps(info)));
        json_object_object_add(o, "probed_caps",
                               rows[i].probed ? caps_to_json(rows[i].probed_caps) : NULL);
        json_object_object_add(o, "probe_error",
                               rows[i].probe_error != NULL
                                   ? json_object_new_string(rows[i].probe_error)
                                   : NULL);
        json_object_array_add(array, o);
    }
    printf("%s\n", json_object_to_json_string_ext(
                       array, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                  JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(array);
}

static void print_backends_table(backend_row *rows, size_t count)
{
    int name_w = 4, version_w = 7;
    size_t i;

    if (count == 0) {
        printf("no backend plugin found (searched SBX_PLUGIN_PATH and %s)\n",
               sbx_plugin_dir());
        return;
    }
    for (i = 0; i < count; i++) {
        int n = (int)strlen(sbx_backend_info_get0_name(rows[i].info));
        int v = (int)strlen(sbx_backend_info_get0_version(rows[i].info));

        if (n > name_w)
            name_w = n;
        if (v > version_w)
            version_w = v;
    }
    printf("%-*s  %-*s  %s\n", name_w, "NAME", version_w, "VERSION", "STATUS");
    for (i = 0; i < count; i++) {
        const sbx_backend_info *info = rows[i].info;
        const char *version = sbx_backend_info_get0_version(info);
        const char *problem = sbx_backend_info_get0_problem(info);
        const char *description = sbx_backend_info_get0_description(info);
        char *declared;

        printf("%-*s  %-*s  %s\n", name_w, sbx_backend_info_get0_name(info),
               version_w, *version ? version : "-",
               problem != NULL ? problem : "ok");
        if (*description)
            printf("    description: %s\n", description);
        printf("    path:        %s\n", sbx_backend_info_get0_path(info));
        if (!rows[i].usable)
            continue;
        declared = caps_to_string(sbx_backend_info_get_caps(info));
        printf("    declared:    %s\n", declared != NULL ? declared : "");
        free(declared);
        if (rows[i].probed) {
            char *probed = caps_to_string(rows[i].probed_caps);

            printf("    probed:      %s\n", probed != NULL ? probed : "");
            free(probed);
        } else {
            printf("    probed:      failed: %s\n",
                   rows[i].probe_error != NULL ? rows[i].probe_error : "");
        }
    }
}

static int cmd_backends(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    sbx_backend_info **list = NULL;
    backend_row *rows;
    sbx_error *error = NULL;
    size_t count = 0, i;
    int opt, json = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            usage_backends(stdout);
            return 0;
        default:
            return bad_option("backends", argv, opt);
        }
    }
    if (optind < argc)
        return usage_error("backends", "unexpected argument \"%s\"", argv[optind]);

    if (sbx_backends_list(&list, &count, &error) < 0) {
        msg_error(error);
        return EXIT_TOOL;
    }
    rows = calloc(count ? count : 1, sizeof *rows);
    if (rows == NULL) {
        sbx_backend_info_list_free(list, count);
        msg("out of memory");
        return EXIT_TOOL;
    }
    for (i = 0; i < count; i++) {
        rows[i].info = list[i];
        rows[i].usable = sbx_backend_info_get0_problem(list[i]) == NULL;
        if (rows[i].usable)
            probe_backend(&rows[i]);
    }
    if (json)
        print_backends_json(rows, count);
    else
        print_backends_table(rows, count);
    for (i = 0; i < count; i++)
        free(rows[i].probe_error);
    free(rows);
    sbx_backend_info_list_free(list, count);
    if (fflush(stdout) != 0) {
        msg("cannot write the list: %s", strerror(errno));
        return EXIT_TOOL;
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(argv[1], "run") == 0)
        usage_run(stdout);
    else if (strcmp(argv[1], "exec-code") == 0)
        usage_exec_code(stdout);
    else if (strcmp(argv[1], "backends") == 0)
        usage_backends(stdout);
    else if (strcmp(argv[1], "help") == 0)
        usage_main(stdout);
    else
        return usage_error("", "unknown command \"%s\"", argv[1]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd;
    int status;

    if (argc < 2) {
        usage_main(stderr);
        return EXIT_TOOL;
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sbx %s\n", sbx_version());
        return fflush(stdout) == 0 ? 0 : EXIT_TOOL;
    }

    install_signal_handlers();
    if (strcmp(cmd, "run") == 0)
        status = cmd_run(argc - 1, argv + 1);
    else if (strcmp(cmd, "exec-code") == 0)
        status = cmd_exec_code(argc - 1, argv + 1);
    else if (strcmp(cmd, "backends") == 0)
        status = cmd_backends(argc - 1, argv + 1);
    else if (strcmp(cmd, "help") == 0)
        status = cmd_help(argc - 1, argv + 1);
    else if (cmd[0] == '-')
        status = usage_error("", "unknown option \"%s\"", cmd);
    else
        status = usage_error("", "unknown command \"%s\"", cmd);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_TOOL;
    return status;
}
