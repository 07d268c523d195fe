/*
 * The sbx tool's messages, usage errors and option parsing (cli.h).
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli.h"

/* Prints "sbx: MESSAGE" to stderr. */
static void vmsg(const char *fmt, va_list ap)
{
    char buf[4096];

    vsnprintf(buf, sizeof buf, fmt, ap);
    fprintf(stderr, "sbx: %s\n", buf);
}

void cli_msg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
}

/* 1 when context @key holds the tail of a command's output ("stdout_tail",
 * "stderr_tail"): the message carries it already, below its first line. */
static int is_output_tail(const char *key)
{
    size_t n = strlen(key);

    return n > 5 && strcmp(key + n - 5, "_tail") == 0;
}

/* Writes @v to stderr with its control characters escaped as
 * sbx_error_to_string() escapes them (\n, \r, \t, \xHH). */
static void put_escaped(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p >= 0x20 && *p != 0x7f)
            fputc(*p, stderr);
        else if (*p == '\n' || *p == '\r' || *p == '\t')
            fprintf(stderr, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
        else
            fprintf(stderr, "\\x%02x", *p);
    }
}

/* Context values this long that the message already holds word for word
 * (a search path, the list of installed backends, a preset's file or
 * command) are not repeated; shorter ones (an id, a port) stay, as keys
 * name what they are. */
#define CLI_CONTEXT_ECHO_MIN 24

/*
 * An error as sbx_error_to_string() writes it, for a person: the message's
 * first line, then the bracket (code, retryable, backend, op, context),
 * then the rest of the message. The bracket leaves out the tails of a
 * command's output (a failed preset setup command: the message ends with
 * them, so they are shown once and readable) and long context values that
 * the message already holds.
 */
static void print_error(const sbx_error *error)
{
    const char *msg = sbx_error_get0_message(error), *nl = strchr(msg, '\n'), *key, *value;
    size_t count = sbx_error_get_context_count(error);

    fprintf(stderr, "sbx: %.*s [code=%s%s", nl ? (int)(nl - msg) : (int)strlen(msg), msg,
            sbx_error_code_name(sbx_error_get_code(error)),
            sbx_error_is_retryable(error) ? ", retryable" : "");
    if (*sbx_error_get0_backend(error))
        fprintf(stderr, "; backend=%s", sbx_error_get0_backend(error));
    if (*sbx_error_get0_op(error))
        fprintf(stderr, "; op=%s", sbx_error_get0_op(error));
    for (size_t i = 0; i < count; i++) {
        if (sbx_error_get0_context_at(error, i, &key, &value) != 0 || is_output_tail(key)
            || (strlen(value) >= CLI_CONTEXT_ECHO_MIN && strstr(msg, value) != NULL))
            continue;
        fprintf(stderr, "; %s=", key);
        put_escaped(value);
    }
    fprintf(stderr, "]%s\n", nl ? nl : "");
}

void cli_error(sbx_error *error)
{
    if (error == NULL) {
        cli_msg("unknown error");
        return;
    }
    print_error(error);
    sbx_error_free(error);
}

int cli_out_of_memory(void)
{
    cli_msg("out of memory");
    return CLI_EXIT_TOOL;
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    if (cmd != NULL)
        fprintf(stderr, "sbx: see 'sbx %s --help'\n", cmd->name);
    else
        fprintf(stderr, "sbx: see 'sbx --help'\n");
    return CLI_EXIT_TOOL;
}

int cli_flush(const char *what)
{
    if (fflush(stdout) != 0) {
        cli_msg("cannot write %s: %s", what, strerror(errno));
        return CLI_EXIT_TOOL;
    }
    return 0;
}

const char *cli_default_backend(void)
{
    const char *env = getenv("SBX_BACKEND");

    return env != NULL && *env != '\0' ? env : "local";
}

const char *cli_remote_backend(const char *backend)
{
    const char *url = getenv("BESPOKE_SANDBOX_URL");

    if (url == NULL || *url == '\0' || strcmp(backend, "remote") == 0)
        return backend;
    setenv("BESPOKE_SANDBOX_BACKEND", backend, 1);
    return "remote";
}

/* ------------------------------------------------------------- options */

/* getopt's value of the long-only option at row I of a table. */
#define LONG_ONLY_BASE 256

/* Reports an option getopt refused. */
static int bad_option(const cli_command *cmd, char **argv, int opt)
{
    const char *arg = argv[optind - 1];

    if (opt == ':')
        return cli_usage_error(cmd, "option \"%s\" needs a value", arg);
    if (optopt != 0 && strncmp(arg, "--", 2) != 0)
        return cli_usage_error(cmd, "unknown option \"-%c\"", optopt);
    return cli_usage_error(cmd, "unknown option \"%s\"", arg);
}

int cli_parse_options(const cli_command *cmd, int argc, char **argv,
                      const cli_option *options, void *ctx)
{
    struct option longopts[CLI_MAX_OPTIONS + 2];
    char shortopts[2 * CLI_MAX_OPTIONS + 4];
    size_t nlong = 0, nshort = 0, count = 0, i;
    int opt, status = CLI_GO_ON;

    shortopts[nshort++] = '+';   /* stop at the first operand */
    shortopts[nshort++] = ':';   /* a missing value is told apart */
    for (; options != NULL && (options[count].name != NULL || options[count].letter != 0);
         count++) {
        const cli_option *o = &options[count];

        if (count == CLI_MAX_OPTIONS)
            abort();   /* a table larger than CLI_MAX_OPTIONS: a bug */
        if (o->letter != 0) {
            shortopts[nshort++] = (char)o->letter;
            if (o->takes_value)
                shortopts[nshort++] = ':';
        }
        if (o->name != NULL) {
            longopts[nlong].name = o->name;
            longopts[nlong].has_arg = o->takes_value ? required_argument : no_argument;
            longopts[nlong].flag = NULL;
            longopts[nlong].val = o->letter != 0 ? o->letter : LONG_ONLY_BASE + (int)count;
            nlong++;
        }
    }
    shortopts[nshort++] = 'h';
    shortopts[nshort] = '\0';
    longopts[nlong].name = "help";
    longopts[nlong].has_arg = no_argument;
    longopts[nlong].flag = NULL;
    longopts[nlong].val = 'h';
    memset(&longopts[nlong + 1], 0, sizeof longopts[0]);

    opterr = 0;
    while (status == CLI_GO_ON &&
           (opt = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const cli_option *o = NULL;

        if (opt >= LONG_ONLY_BASE && (size_t)(opt - LONG_ONLY_BASE) < count) {
            o = &options[opt - LONG_ONLY_BASE];
        } else if (opt != 'h' && opt != ':' && opt != '?') {
            for (i = 0; i < count && o == NULL; i++)
                if (options[i].letter == opt)
                    o = &options[i];
        }
        if (o != NULL) {
            if (o->flag != NULL)
                *o->flag = 1;
            if (o->handle != NULL)
                status = o->handle(cmd, o->takes_value ? optarg : NULL, ctx);
        } else if (opt == 'h') {
            cmd->usage(stdout);
            status = 0;
        } else {
            status = bad_option(cmd, argv, opt);
        }
    }
    return status;
}

int cli_no_operands(const cli_command *cmd, int argc, char **argv)
{
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[optind]);
    return CLI_GO_ON;
}

int cli_parse_options_only(const cli_command *cmd, int argc, char **argv,
                           const cli_option *options, void *ctx)
{
    int status = cli_parse_options(cmd, argc, argv, options, ctx);

    return status == CLI_GO_ON ? cli_no_operands(cmd, argc, argv) : status;
}

int cli_parse_positive_or(const cli_command *cmd, const char *option, const char *arg,
                          const char *unit, const char *otherwise, double *out)
{
    char *end = (char *)arg;
    double v;

    errno = 0;
    v = *arg != '\0' ? strtod(arg, &end) : 0;
    if (*arg == '\0' || errno != 0 || *end != '\0' || !isfinite(v) || v <= 0)
        return cli_usage_error(cmd, "invalid %s value \"%s\": expected %s, a finite number "
                               "greater than 0 (fractions allowed)%s%s", option, arg, unit,
                               otherwise != NULL ? "; " : "", otherwise != NULL ? otherwise : "");
    *out = v;
    return CLI_GO_ON;
}

int cli_parse_positive(const cli_command *cmd, const char *option, const char *arg,
                       const char *unit, double *out)
{
    return cli_parse_positive_or(cmd, option, arg, unit, NULL, out);
}

int cli_parse_positive_int64(const cli_command *cmd, const char *option, const char *arg,
                             const char *unit, int64_t *out)
{
    char *end = (char *)arg;
    long long v;

    errno = 0;
    v = *arg != '\0' ? strtoll(arg, &end, 10) : 0;
    if (*arg == '\0' || errno != 0 || *end != '\0' || v <= 0)
        return cli_usage_error(cmd, "invalid %s value \"%s\": expected %s, a whole number "
                               "from 1 to %" PRId64, option, arg, unit, INT64_MAX);
    *out = (int64_t)v;
    return CLI_GO_ON;
}

int cli_check_env(const cli_command *cmd, const char *arg)
{
    const char *eq = strchr(arg, '=');

    if (eq == NULL || eq == arg)
        return cli_usage_error(cmd, "invalid -e value \"%s\": expected KEY=VALUE", arg);
    return CLI_GO_ON;
}

int cli_env_arg(const cli_command *cmd, const char *arg, const char **kv)
{
    const char *eq = strchr(arg, '=');
    const char *value;
    char *made;

    *kv = NULL;
    if (eq == arg || *arg == '\0')
        return cli_usage_error(cmd, "invalid -e value \"%s\": expected KEY=VALUE or KEY", arg);
    if (eq != NULL) {
        *kv = arg;
        return CLI_GO_ON;
    }
    /* -e KEY: docker's "the value of KEY in this environment". */
    value = getenv(arg);
    if (value == NULL)
        return CLI_GO_ON;
    made = malloc(strlen(arg) + strlen(value) + 2);
    if (made == NULL)
        return cli_out_of_memory();
    sprintf(made, "%s=%s", arg, value);
    *kv = made;     /* sbx's argument strings live until it exits: so does this */
    return CLI_GO_ON;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void cli_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
