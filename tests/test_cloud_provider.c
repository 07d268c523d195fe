/*
 * test_cloud_provider.c — plugins/cloud/base/provider.c, linked in: the
 * gone flag and its error, the wait for a state (done, failed, timed out),
 * the session state's version check, the cwd of a command script and its
 * error, descriptors as sink and source, the command that signals every
 * marked process, and the create's environment file, run by sh to show
 * that a per-call key wins and values arrive literally; then the sandbox
 * head (accessors, destroy), the workdir check and the path helpers, the plugin's own mkdir
 * and chmod commands over a stand-in runner, the answer to a call on the
 * sandbox, what exec_start checks first, the kill of a command's marked
 * processes, the ids a listing collects, the client's config and
 * credential, the refusal of an option, and the multipart body of an
 * upload, the create's number options by a table of bounds and its gpu
 * option; the plugin's sandbox struct allocated around its head, the
 * session state's start, the create's working directory, a directory
 * listed by find, the ids of a create token and the end of a create that
 * got no answer (its sandbox reaped by the token); the start of resume
 * (state, answer, ended states), exec_resize's check and wait, a request
 * without its URL, write_file's upload and chmod, the fixed probe and
 * the end of client_new; a per-call environment as export lines, the
 * error of a file call's answer, and whether a sandbox ended (the gone
 * flag and error that follow), the setup slot; a JSON POST ({} for no
 * body), the exec_start of script procs over a stand-in worker, and the
 * list_files and read_file slots over a stand-in runner and download;
 * the gone error with the provider's view and the gone mark, through a
 * host that records context, and the undo of a create that failed (its sandbox deleted
 * and freed, its id in the error when asked); a status read with the
 * provider's word for none; the client head a plugin's spec describes
 * (base URL, credential, reaper, free).
 * Errors are looked at through cl_last() (no host is loaded here).
 */
#include "provider.h"
#ifdef SBX_TEST_CLOUD_WS
#include "ws.h"
#endif

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <math.h>
#include <pthread.h>
#include <sys/socket.h>

#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <json-c/json.h>

Test(provider, gone_flag_and_its_error)
{
    cl_gone g;
    cl_gone_init(&g);
    cr_assert_eq(cl_gone_get(&g), 0);
    cr_assert_eq(cl_gone_check(&g, "exec", "acme", "sb-1", NULL), 0);
    cl_gone_set(&g);
    cr_assert_eq(cl_gone_get(&g), 1);
    cr_assert_eq(cl_gone_check(&g, "exec", "acme", "sb-1", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-1 is gone (the provider no longer has it)");
    cl_gone_destroy(&g);
}

typedef struct looks {
    int n, done_at, fail_at;
} looks;

static int look(void *ud, const char **state, sbx_error **error)
{
    looks *l = ud;
    (void)error;
    l->n++;
    *state = "pending";
    if (l->fail_at && l->n == l->fail_at) {
        cl_fail(NULL, SBX_ERROR_CREATION_FAILED, "create", "it broke");
        return -1;
    }
    return l->done_at && l->n >= l->done_at;
}

Test(provider, wait_until_done_failed_and_timed_out)
{
    looks a = { 0, 3, 0 };
    cr_assert_eq(cl_wait_until(NULL, 30, look, &a, "create", "x running", NULL), 0);
    cr_assert_eq(a.n, 3);
    looks b = { 0, 0, 2 };
    cr_assert_eq(cl_wait_until(NULL, 30, look, &b, "create", "x running", NULL), -1);
    cr_assert_eq(b.n, 2);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CREATION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "it broke");
    looks c = { 0, 0, 0 };
    cr_assert_eq(cl_wait_until(NULL, 0.2, look, &c, "create", "x running", NULL), -1);
    cr_assert(c.n >= 2, "%d looks", c.n);
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_str_eq(cl_last()->msg, "x running did not happen (it is pending)");
}

Test(provider, state_in_checks_version_and_id)
{
    const char *id = NULL;
    json_object *j = cl_state_in("{\"version\":1,\"sandbox_id\":\"sb-9\"}", 1, "sandbox_id",
                                 "acme", "resume", &id, NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(id, "sb-9");
    json_object_put(j);
    const char *bad[] = { "{\"version\":2,\"sandbox_id\":\"sb-9\"}", "{\"version\":1}",
                          "{\"version\":1,\"sandbox_id\":\"\"}", "not json", NULL };
    for (int i = 0; bad[i]; i++) {
        cr_assert_null(cl_state_in(bad[i], 1, "sandbox_id", "acme", "resume", &id, NULL),
                       "%s", bad[i]);
        cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
        cr_assert_str_eq(cl_last()->msg,
                         "acme session state: needs \"version\": 1 and a \"sandbox_id\"");
    }
    cr_assert_null(cl_state_in(NULL, 1, "sandbox_id", "acme", "resume", &id, NULL));
}

Test(provider, script_cwd_and_its_error)
{
    char *script = cl_shell_script(NULL, "pwd", "/work/my dir");
    char *q = cl_script_cwd(script);
    cr_assert_str_eq(q, "'/work/my dir'");
    cl_cwd_missing_error(NULL, "exec", q);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg,
                     "the working directory '/work/my dir' does not exist in the sandbox");
    free(q);
    free(script);
    script = cl_shell_script(NULL, "pwd", NULL);
    cr_assert_null(cl_script_cwd(script));
    free(script);
    cr_assert_null(cl_script_cwd(NULL));
}

/* An argv runs after "exec", but one whose first word starts with '-'
 * (which exec would take for an option) runs as a plain command. */
Test(provider, script_of_an_argv)
{
    const char *ls[] = {"ls", "-l", "a b", NULL};
    const char *dash[] = {"-x", "--help", NULL};
    const char *dashdash[] = {"--", "y", NULL};
    char *s = cl_shell_script(ls, NULL, NULL);
    cr_assert_str_eq(s, "exec 'ls' '-l' 'a b'");
    free(s);
    s = cl_shell_script(dash, NULL, "/w");
    cr_assert_str_eq(s, "cd -- '/w' || exit 211\n'-x' '--help'");
    free(s);
    s = cl_shell_script(dashdash, NULL, NULL);
    cr_assert_str_eq(s, "'--' 'y'");
    free(s);
}

/* A path starting with '-' gets "./" before it; any other is quoted as
 * it is. */
Test(provider, quoted_paths)
{
    const char *in[] = {"-f", "--x y", "/abs/-f", "rel/-f", "it's"};
    const char *out[] = {"'./-f'", "'./--x y'", "'/abs/-f'", "'rel/-f'", "'it'\\''s'"};
    for (size_t i = 0; i < 5; i++) {
        char *q = cl_shell_quote_path(in[i]);
        cr_assert_str_eq(q, out[i]);
        free(q);
    }
}

Test(provider, fd_sink_and_source)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(cl_fd_sink(&fds[1], "abc\0def", 7), 0);
    close(fds[1]);
    char buf[16];
    cr_assert_eq(cl_fd_source(&fds[0], buf, sizeof buf), 7);
    cr_assert_eq(memcmp(buf, "abc\0def", 7), 0);
    cr_assert_eq(cl_fd_source(&fds[0], buf, sizeof buf), 0);
    close(fds[0]);
    int closed = fds[1];
    cr_assert_eq(cl_fd_sink(&closed, "x", 1), -1);
}

Test(provider, mark_kill_command)
{
    char *c = cl_mark_kill_command("sbx-exec-0a1b", SIGTERM);
    cr_assert_str_eq(c, "for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/environ 2>/dev/null "
                        "| grep -qx 'SBX_EXEC_ID=sbx-exec-0a1b' && kill -15 ${d#/proc/} "
                        "2>/dev/null; done; exit 0");
    free(c);
    cr_assert_null(cl_mark_kill_command("a'b", SIGKILL));
    cr_assert_null(cl_mark_kill_command("", SIGKILL));
    cr_assert_null(cl_mark_kill_command(NULL, SIGKILL));
}

Test(provider, mark_kill_command_var)
{
    char *c = cl_mark_kill_command_var("SBX_RAY_SANDBOX", "sbx-ray-0a1b", SIGKILL);
    cr_assert_str_eq(c, "for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/environ 2>/dev/null "
                        "| grep -qx 'SBX_RAY_SANDBOX=sbx-ray-0a1b' && kill -9 ${d#/proc/} "
                        "2>/dev/null; done; exit 0");
    free(c);
    cr_assert_null(cl_mark_kill_command_var("A=B", "x", SIGKILL));
    cr_assert_null(cl_mark_kill_command_var("", "x", SIGKILL));
    cr_assert_null(cl_mark_kill_command_var(NULL, "x", SIGKILL));
    cr_assert_null(cl_mark_kill_command_var("SBX_RAY_SANDBOX", "a b", SIGKILL));
}

/* Runs @script with sh; its stdout, a new string. */
static char *sh_out(const char *script)
{
    FILE *f = popen(script, "r");
    cr_assert_not_null(f);
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    cr_assert_eq(pclose(f), 0, "%s", script);
    return strdup(buf);
}

Test(provider, env_file_per_call_keys_win_and_values_are_literal)
{
    const char *env[] = { "A=one", "B=it's $x `y` \"z\"\nline 2", "C=", NULL };
    char *text = cl_env_file(env);
    cr_assert_str_eq(text, "case :$SBX_CALL_ENV_KEYS: in *:A:*) ;; *) export A='one' ;; esac\n"
                           "case :$SBX_CALL_ENV_KEYS: in *:B:*) ;; *) export B='it'\\''s $x `y` "
                           "\"z\"\nline 2' ;; esac\n"
                           "case :$SBX_CALL_ENV_KEYS: in *:C:*) ;; *) export C='' ;; esac\n");
    char path[] = "/tmp/sbx-provider-env-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *src = cl_env_file_source(path);
    const char *call[] = { "A=call", NULL };
    char *keys = cl_call_keys(call);
    cr_assert_str_eq(keys, "A");
    char *script = NULL;
    cr_assert(asprintf(&script, "A=call SBX_CALL_ENV_KEYS=%s sh -c '%s"
                                "printf \"%%s|%%s|%%s|%%s\" \"$A\" \"$B\" \"$C\" "
                                "\"${SBX_CALL_ENV_KEYS-unset}\"'", keys, src) > 0);
    char *out = sh_out(script);
    cr_assert_str_eq(out, "call|it's $x `y` \"z\"\nline 2||unset");
    free(out);
    free(script);
    free(src);
    free(keys);
    unlink(path);
    free(text);
    const char *two[] = { "K=1", "L=2", NULL };
    keys = cl_call_keys(two);
    cr_assert_str_eq(keys, "K:L");
    free(keys);
    keys = cl_call_keys(NULL);
    cr_assert_str_eq(keys, "");
    free(keys);
    const char *badkey[] = { "1X=2", NULL };
    cr_assert_null(cl_env_file(badkey));
    const char *none[] = { NULL };
    text = cl_env_file(none);
    cr_assert_str_eq(text, "");
    free(text);
}

Test(provider, env_exports_quote_values_and_skip_strings_without_a_value)
{
    const char *env[] = { "A=one", "NOEQ", "B=it's $x\nline 2", "C=", "D=a=b", NULL };
    char *text = cl_env_exports(env);
    cr_assert_str_eq(text, "export A='one'\n"
                           "export B='it'\\''s $x\nline 2'\n"
                           "export C=''\n"
                           "export D='a=b'\n");
    /* Sourced by sh, the values arrive literally. */
    char path[] = "/tmp/sbx-provider-exports-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    free(text);
    char *script = NULL;
    cr_assert(asprintf(&script, "sh -c '. %s; printf \"%%s|%%s|%%s|%%s\" \"$A\" \"$B\" \"$C\" "
                                "\"$D\"'", path) > 0);
    char *out = sh_out(script);
    cr_assert_str_eq(out, "one|it's $x\nline 2||a=b");
    free(out);
    free(script);
    unlink(path);
    text = cl_env_exports(NULL);
    cr_assert_str_eq(text, "");
    free(text);
    cl_buf b = { 0 };
    cr_assert_eq(cl_buf_printf(&b, "# head\n"), 0);
    const char *one[] = { "K=v w", NULL };
    cr_assert_eq(cl_buf_env_exports(&b, one), 0);
    cr_assert_eq(cl_buf_env_exports(&b, NULL), 0);
    cr_assert_str_eq(b.data, "# head\nexport K='v w'\n");
    cl_buf_clear(&b);
}

/* ------------------------------------------------------------------------ */
/* The sandbox head, and what creates and commands write alike               */
/* ------------------------------------------------------------------------ */

Test(provider, printf_strv_dup_random_hex_and_env_object)
{
    char *s = cl_printf("%s-%d", "sb", 7);
    cr_assert_str_eq(s, "sb-7");
    free(s);
    const char *v[] = { "A=1", "B", NULL };
    char **d = cl_strv_dup(v);
    cr_assert_str_eq(d[0], "A=1");
    cr_assert_str_eq(d[1], "B");
    cr_assert_null(d[2]);
    cr_assert_neq((void *)d[0], (void *)v[0]);
    cl_strv_free(d);
    d = cl_strv_dup(NULL);
    cr_assert_not_null(d);
    cr_assert_null(d[0]);
    cl_strv_free(d);
    char a[25], b[25];
    cl_random_hex(a, 12);
    cl_random_hex(b, 12);
    cr_assert_eq(strlen(a), 24);
    cr_assert_eq(strspn(a, "0123456789abcdef"), 24, "%s", a);
    cr_assert_str_neq(a, b);
    const char *env[] = { "K=v=w", "EMPTY=", "NOEQ", NULL };
    json_object *e = cl_env_object(env);
    cr_assert_str_eq(json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN),
                     "{\"K\":\"v=w\",\"EMPTY\":\"\"}");
    json_object_put(e);
    e = cl_env_object(NULL);
    cr_assert_str_eq(json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN), "{}");
    json_object_put(e);
}

Test(provider, workdir_check)
{
    cr_assert_eq(cl_workdir_check("acme", NULL, NULL), 0);
    cr_assert_eq(cl_workdir_check("acme", "", NULL), 0);
    cr_assert_eq(cl_workdir_check("acme", "/work", NULL), 0);
    cr_assert_eq(cl_workdir_check("acme", "work/x", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg,
                     "acme backend: workdir work/x is not an absolute path in the sandbox");
    cr_assert_eq(cl_workdir_check("acme", "/a/../b", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme backend: workdir /a/../b has a \"..\" component");
    cr_assert_eq(cl_workdir_check("acme", "/a/..", NULL), -1);
    cr_assert_eq(cl_workdir_check("acme", "/a/..b/c..", NULL), 0);
    cr_assert_eq(cl_workdir_ok("/a/..b"), 1);
    cr_assert_eq(cl_workdir_ok("/.."), 0);
    cr_assert_eq(cl_workdir_ok("a"), 0);
    cr_assert_eq(cl_workdir_ok(""), 0);
    cr_assert_eq(cl_workdir_ok(NULL), 0);
}

Test(provider, trim_slash_and_path_in)
{
    char *s = cl_trim_slash("https://x.test/api//");
    cr_assert_str_eq(s, "https://x.test/api");
    free(s);
    s = cl_trim_slash("/");
    cr_assert_str_eq(s, "");
    free(s);
    const char *cases[][3] = {
        { "/w", "f", "/w/f" },       { "/w/", "d/f", "/w/d/f" }, { "/", "f", "/f" },
        { "/w", "/abs", "/abs" },    { NULL, "rel", "rel" },     { NULL, "/abs", "/abs" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s = cl_path_in(cases[i][0], cases[i][1]);
        cr_assert_str_eq(s, cases[i][2], "%s + %s", cases[i][0] ? cases[i][0] : "(none)",
                         cases[i][1]);
        free(s);
    }
    /* The route of a file named in the query: the path made absolute
     * against the workdir (when one is given), percent-encoded. */
    s = cl_path_query("/files?path=", "/w d", "a&b/c");
    cr_assert_str_eq(s, "/files?path=%2Fw%20d%2Fa%26b%2Fc");
    free(s);
    s = cl_path_query("/files?path=", "/w", "/abs/f.txt");
    cr_assert_str_eq(s, "/files?path=%2Fabs%2Ff.txt");
    free(s);
    s = cl_path_query("/x?p=", NULL, "rel");
    cr_assert_str_eq(s, "/x?p=rel");
    free(s);
}

/* A stat_file's name: copied into the thread's buffer, which outlives the
 * name it was given; NULL is "". */
Test(provider, stat_name_is_the_threads_copy)
{
    char *name = strdup("report.txt");
    const char *kept = cl_stat_name(name);
    cr_assert_neq(kept, name);
    free(name);
    cr_assert_str_eq(kept, "report.txt");
    cr_assert_eq(cl_stat_name(NULL), kept);
    cr_assert_str_eq(kept, "");
    char longer[5000];
    memset(longer, 'n', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    cr_assert_eq(strlen(cl_stat_name(longer)), 4095);
}

/* A plugin's sandbox: the head first. */
struct sbx_plugin_sandbox {
    cl_sandbox s;
    int deletes;        /* calls of del() */
    int fail;           /* del() fails */
    char cmd[512];      /* the last command run() got */
    int code;           /* run()'s exit status */
};

static int del(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id, const char *op,
               sbx_error **error)
{
    sbx_plugin_sandbox *sb = (sbx_plugin_sandbox *)client;
    (void)ctx;
    cr_assert_str_eq(id, "sb-3");
    cr_assert_str_eq(op, "destroy");
    sb->deletes++;
    if (sb->fail) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "no answer");
        return -1;
    }
    return 0;
}

Test(provider, sandbox_head_accessors_and_destroy)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-3"), 0);
    cr_assert_str_eq(cl_sandbox_id(&sb), "sb-3");
    cr_assert_str_eq(cl_sandbox_root(&sb), "");
    sbx_plugin_client *c = (sbx_plugin_client *)&sb;
    sb.fail = 1;
    cr_assert_eq(cl_sandbox_destroy(&sb.s, c, del, NULL, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_eq(cl_gone_get(&sb.s.gone), 0);
    sb.fail = 0;
    cr_assert_eq(cl_sandbox_destroy(&sb.s, c, del, NULL, NULL), 0);
    cr_assert_eq(cl_gone_get(&sb.s.gone), 1);
    cr_assert_eq(cl_sandbox_destroy(&sb.s, c, del, NULL, NULL), 0);
    cr_assert_eq(sb.deletes, 2);
    cl_sandbox_clear(&sb.s);
    cr_assert_null(sb.s.id);
}

static int run(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd, int *code,
               const char *op, sbx_error **error)
{
    (void)ctx;
    (void)op;
    (void)error;
    snprintf(sb->cmd, sizeof sb->cmd, "%s", cmd);
    *code = sb->code;
    return 0;
}

/* An answer to a call on the sandbox: 2xx is 0; 404 sets the gone flag
 * and is its error; another status is the answer's error. */
Test(provider, sandbox_answer)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-4"), 0);
    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    cl_resp r = { 0 };
    r.status = 202;
    cr_assert_eq(cl_sandbox_answer(&sb.s, h, &r, "acme", "stop", "stop the sandbox", NULL), 0);
    r.status = 500;
    cr_assert_eq(cl_sandbox_answer(&sb.s, h, &r, "acme", "stop", "stop the sandbox", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "stop the sandbox: no message (HTTP 500)");
    cr_assert_eq(cl_gone_get(&sb.s.gone), 0);
    r.status = 404;
    cr_assert_eq(cl_sandbox_answer(&sb.s, h, &r, "acme", "stop", "stop the sandbox", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-4 is gone (the provider no longer has it)");
    cr_assert_eq(cl_gone_get(&sb.s.gone), 1);
    cl_http_free(h);
    cl_sandbox_clear(&sb.s);
}

/* The error of a file call's answer; "nothing stored" shows as the last
 * error left as it was (no host is loaded to make an sbx_error). */
Test(provider, file_fail_by_answer_and_gone_flag)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-5"), 0);
    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    cl_resp r = { 0 };
    r.status = 404;
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 0, "read_file", "a/b", "file", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "no such file in the sandbox: a/b");
    r.status = 500;
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 0, "write_file", "c", "directory for file", NULL),
                 -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "directory for file: no message (HTTP 500)");
    cr_assert_eq(cl_last()->http_status, 500);
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 1, "write_file", "c", "directory for file", NULL),
                 -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    r.status = 422;
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 1, "list_files", "d", "directory", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "directory: no message (HTTP 422)");
    /* An error stored already, no answer, a sandbox that is gone: nothing. */
    cl_fail(NULL, SBX_ERROR_TIMEOUT, "x", "before");
    sbx_error *stored = (sbx_error *)(void *)&r;   /* stands for one; never read */
    r.status = 404;
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 0, "read_file", "e", "file", &stored), -1);
    cr_assert_eq(stored, (sbx_error *)(void *)&r);
    r.status = 0;
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 0, "read_file", "e", "file", NULL), -1);
    r.status = 404;
    cl_gone_set(&sb.s.gone);
    cr_assert_eq(cl_file_fail(&sb.s, h, &r, 0, "read_file", "e", "file", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_str_eq(cl_last()->msg, "before");
    cl_http_free(h);
    cl_sandbox_clear(&sb.s);
}

Test(provider, make_workdir_and_set_mode)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_make_workdir(&sb, run, NULL, "acme", "/w o", "create", NULL), 0);
    cr_assert_str_eq(sb.cmd, "mkdir -p -- '/w o'");
    sb.code = 1;
    cr_assert_eq(cl_make_workdir(&sb, run, NULL, "acme", "/w o", "create", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg,
                     "acme: cannot make the working directory /w o (mkdir exited 1)");
    sb.code = 0;
    cr_assert_eq(cl_set_mode(&sb, run, NULL, "/h/a b", "a b", 0100755, "write_file", NULL), 0);
    cr_assert_str_eq(sb.cmd, "chmod 755 -- '/h/a b'");
    sb.code = 2;
    cr_assert_eq(cl_set_mode(&sb, run, NULL, "/h/a b", "a b", 0600, "write_file", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "cannot set mode 600 on a b (chmod exited 2)");
}

/* The kill of a command's marked processes: nothing once it has ended,
 * else the scan of cl_mark_kill_command() through the runner. */
Test(provider, proc_mark_kill)
{
    sbx_plugin_sandbox sb = { 0 };
    cl_proc p = { 0 };
    pthread_mutex_init(&p.lock, NULL);
    sb.code = 7;
    cr_assert_eq(cl_proc_mark_kill(&p, &sb, run, NULL, "sbx-exec-1a", 9, NULL), 0);
    char *want = cl_mark_kill_command("sbx-exec-1a", 9);
    cr_assert_str_eq(sb.cmd, want);
    free(want);
    sb.cmd[0] = '\0';
    cr_assert_eq(cl_proc_mark_kill(&p, &sb, run, NULL, "bad tag", 9, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(sb.cmd, "");
    p.ended = 1;
    cr_assert_eq(cl_proc_mark_kill(&p, &sb, run, NULL, "sbx-exec-1a", 9, NULL), 0);
    cr_assert_str_eq(sb.cmd, "");
    pthread_mutex_destroy(&p.lock);
}

/* The resize of a terminal's command where the provider has no resize
 * call: nothing once it ended; the stty scan through the runner; its exit
 * statuses as errors naming the size. */
Test(provider, proc_mark_resize)
{
    sbx_plugin_sandbox sb = { 0 };
    cl_proc p = { 0 };
    pthread_mutex_init(&p.lock, NULL);
    cr_assert_eq(cl_proc_mark_resize(&p, &sb, run, NULL, "sbx-exec-1a", 40, 100, NULL), 0);
    char *want = cl_mark_resize_command("sbx-exec-1a", 40, 100);
    cr_assert_str_eq(sb.cmd, want);
    free(want);
    sb.code = CL_RESIZE_NONE_EXIT;
    cr_assert_eq(cl_proc_mark_resize(&p, &sb, run, NULL, "sbx-exec-1a", 40, 100, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "cannot resize the terminal to 40x100: no process of the "
                                     "command has it as its stdin");
    sb.code = 1;
    cr_assert_eq(cl_proc_mark_resize(&p, &sb, run, NULL, "sbx-exec-1a", 40, 100, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "cannot resize the terminal to 40x100 (stty exited 1)");
    sb.cmd[0] = '\0';
    p.ended = 1;
    cr_assert_eq(cl_proc_mark_resize(&p, &sb, run, NULL, "sbx-exec-1a", 40, 100, NULL), 0);
    cr_assert_str_eq(sb.cmd, "");
    cr_assert_null(cl_mark_resize_command("a b", 40, 100));
    cr_assert_null(cl_mark_resize_command("x", 0, 100));
    cr_assert_null(cl_mark_resize_command("x", 40, 65536));
    pthread_mutex_destroy(&p.lock);
}

/* cl_mark_resize_command() run by /bin/sh against a real command on a
 * real terminal: the terminal's size is set, and the command sees
 * SIGWINCH. */
Test(provider, mark_resize_command_resizes_a_real_terminal)
{
    struct winsize ws = { .ws_row = 24, .ws_col = 80 };
    int master, slave;
    cr_assert_eq(openpty(&master, &slave, NULL, NULL, &ws), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setsid();
        ioctl(slave, TIOCSCTTY, 0);
        dup2(slave, 0);
        dup2(slave, 1);
        dup2(slave, 2);
        close(master);
        setenv("SBX_EXEC_ID", "sbx-exec-7e57", 1);
        execl("/bin/sh", "sh", "-c", "trap 'echo WINCH; exit 0' WINCH; echo up; "
              "while :; do sleep 0.05; done", (char *)NULL);
        _exit(127);
    }
    close(slave);
    char buf[256];
    size_t len = 0;
    while (len < 4 || !memmem(buf, len, "up", 2)) {
        ssize_t n = read(master, buf + len, sizeof buf - 1 - len);
        cr_assert_gt(n, 0);
        len += (size_t)n;
    }
    char *cmd = cl_mark_resize_command("sbx-exec-7e57", 40, 100);
    int st = system(cmd);
    free(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the resize exited %d", st);
    cr_assert_eq(ioctl(master, TIOCGWINSZ, &ws), 0);
    cr_assert_eq(ws.ws_row, 40);
    cr_assert_eq(ws.ws_col, 100);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    len = 0;
    for (;;) {
        ssize_t n = read(master, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    cr_assert(strstr(buf, "WINCH") != NULL, "the command's output: \"%s\"", buf);
    close(master);
}

/* What exec_start checks first: the gone flag, a terminal, a user. */
Test(provider, exec_check)
{
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-5"), 0);
    sbx_plugin_exec_request rq = { 0 };
    cr_assert_eq(cl_exec_check(&s, "acme", &rq, 0, NULL), 0);
    rq.user = "root";
    cr_assert_eq(cl_exec_check(&s, "acme", &rq, 1, NULL), 0);
    cr_assert_eq(cl_exec_check(&s, "acme", &rq, 0, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(cl_last()->msg, "acme backend: commands run as the sandbox's user; user "
                                     "root cannot be chosen per command");
    rq.user = NULL;
    rq.tty_cols = 80;
    cr_assert_eq(cl_exec_check(&s, "acme", &rq, 1, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_FEATURE_NOT_SUPPORTED);
    cr_assert_str_eq(cl_last()->msg, "acme backend: commands on a terminal are not supported");
    rq.tty_cols = 0;
    cl_gone_set(&s.gone);
    cr_assert_eq(cl_exec_check(&s, "acme", &rq, 1, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cl_sandbox_clear(&s);
}

static char script_seen[512];   /* what exec_worker() saw of its command */

/* A stand-in worker: keeps the script and overlay it got, writes "out" to
 * stdout and ends with 7. */
static int exec_worker(cl_proc *base)
{
    cl_script_proc *p = (cl_script_proc *)(void *)base;
    snprintf(script_seen, sizeof script_seen, "%s|%s|%.9s", p->script, p->env[0], p->tag);
    cl_proc_output(base, 1, "out", 3);
    return 7;
}

/* The exec_start of a provider whose commands are script procs: the
 * script in the workdir given, the overlay, the worker's output and exit
 * code; a terminal and the gone flag refused before anything starts. */
Test(provider, script_exec_start)
{
    cl_backend = "acme";
    sbx_plugin_sandbox *sb = cl_sandbox_alloc(sizeof(*sb), "sb-9");
    cr_assert_not_null(sb);
    int out[2];
    cr_assert_eq(pipe(out), 0);
    static const char *const env[] = { "A=1", NULL };
    sbx_plugin_exec_request rq = { 0 };
    rq.struct_size = sizeof(rq);
    rq.shell = "echo hi";
    rq.env = env;
    rq.stdin_fd = -1;
    rq.stdout_fd = out[1];
    rq.stderr_fd = -1;
    sbx_plugin_process *proc = NULL;
    cr_assert_eq(cl_script_exec_start(sb, "acme", "/w", &rq, run, exec_worker, &proc, NULL), 0);
    int code = -1;
    cr_assert_eq(cl_script_exec_wait(proc, NULL, 5000, &code, NULL), 1);
    cr_assert_eq(code, 7);
    cr_assert_str_eq(script_seen, "cd -- '/w' || exit 211\necho hi|A=1|sbx-exec-");
    cl_gone_set(&sb->s.gone);
    cl_script_exec_free(proc);
    close(out[1]);
    char buf[16] = { 0 };
    cr_assert_eq(read(out[0], buf, sizeof buf - 1), 3);
    cr_assert_str_eq(buf, "out");
    close(out[0]);
    proc = NULL;
    cr_assert_eq(cl_script_exec_start(sb, "acme", "/w", &rq, run, exec_worker, &proc, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_null(proc);
    cl_sandbox_free(sb);
}

/* The check of a provider that runs commands on a terminal: a terminal
 * passes, half a size is invalid_argument naming it, a user and the gone
 * flag as cl_exec_check(). */
Test(provider, exec_check_pty)
{
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-6"), 0);
    sbx_plugin_exec_request rq = { 0 };
    rq.tty_rows = 24;
    rq.tty_cols = 80;
    cr_assert_eq(cl_exec_check_pty(&s, "acme", &rq, 0, NULL), 0);
    rq.tty_cols = 0;
    cr_assert_eq(cl_exec_check_pty(&s, "acme", &rq, 0, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme backend: terminal size 24 rows x 0 columns is "
                                     "invalid (both > 0, or both 0 for no terminal)");
    rq.tty_rows = 0;
    rq.user = "root";
    cr_assert_eq(cl_exec_check_pty(&s, "acme", &rq, 0, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_FEATURE_NOT_SUPPORTED);
    rq.user = NULL;
    cl_gone_set(&s.gone);
    cr_assert_eq(cl_exec_check_pty(&s, "acme", &rq, 1, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cl_sandbox_clear(&s);
}

/* The credential headers for a connection the pool does not make. */
Test(provider, http_auth_headers)
{
    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    char **v = cl_http_auth_headers(h);
    cr_assert_not_null(v);
    cr_assert_null(v[0]);
    cl_strv_free(v);
    cr_assert_eq(cl_http_set_auth(h, "Authorization", "Bearer k-1"), 0);
    cr_assert_eq(cl_http_add_header(h, "X-Org", "o-2"), 0);
    v = cl_http_auth_headers(h);
    cr_assert_str_eq(v[0], "Authorization: Bearer k-1");
    cr_assert_str_eq(v[1], "X-Org: o-2");
    cr_assert_null(v[2]);
    cl_strv_free(v);
    cl_http_free(h);
}

/* The ids a listing collects, and its end: an empty array for none, the
 * ids freed when the listing failed. */
Test(provider, ids_collected_and_finished)
{
    cl_ids s = { 0 };
    char **ids = NULL;
    cr_assert_eq(cl_ids_finish(&s, 0, &ids, "create", NULL), 0);
    cr_assert_not_null(ids);
    cr_assert_null(ids[0]);
    cl_strv_free(ids);
    cr_assert_eq(cl_ids_add(&s, "a"), 0);
    cr_assert_eq(cl_ids_add(&s, NULL), 0);
    cr_assert_eq(cl_ids_add(&s, "b"), 0);
    cr_assert_eq(s.n, 2);
    cr_assert_eq(cl_ids_finish(&s, 0, &ids, "create", NULL), 0);
    cr_assert_str_eq(ids[0], "a");
    cr_assert_str_eq(ids[1], "b");
    cr_assert_null(ids[2]);
    cr_assert_null(s.v);
    cr_assert_eq(s.n, 0);
    cl_strv_free(ids);
    cr_assert_eq(cl_ids_add(&s, "c"), 0);
    ids = NULL;
    cr_assert_eq(cl_ids_finish(&s, -1, &ids, "create", NULL), -1);
    cr_assert_null(ids);
    cr_assert_null(s.v);
}

/* A command's failure: the thread's last error (its http_status kept),
 * reason=gone and sandbox_id when the sandbox is, and context pairs set
 * after it: added, or replacing the value of the same key, up to
 * CL_PROC_CTX_MAX. */
Test(provider, proc_failure_and_its_context)
{
    cl_proc p = { 0 };
    pthread_mutex_init(&p.lock, NULL);
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-6"), 0);
    cl_fail(NULL, SBX_ERROR_CONNECTION, "exec", "no answer");
    cl_proc_fail_in(&p, &s);
    cr_assert_eq(p.err_code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(p.err_msg, "no answer");
    cr_assert_eq(p.err_nctx, 0);
    cl_gone_error(NULL, "exec", "acme", "sb-6");
    cl_gone_set(&s.gone);
    cl_proc_fail_in(&p, &s);
    cr_assert_eq(p.err_code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(p.err_msg, "acme sandbox sb-6 is gone (the provider no longer has it)");
    cr_assert_eq(p.err_nctx, 2);
    cr_assert_str_eq(p.err_ctx_key[0], "reason");
    cr_assert_str_eq(p.err_ctx_val[0], "gone");
    cr_assert_str_eq(p.err_ctx_key[1], "sandbox_id");
    cr_assert_str_eq(p.err_ctx_val[1], "sb-6");
    cl_proc_context(&p, "state", "archived");
    cl_proc_context(&p, "reason", "stopped");
    cr_assert_eq(p.err_nctx, 3);
    cr_assert_str_eq(p.err_ctx_key[2], "state");
    cr_assert_str_eq(p.err_ctx_val[2], "archived");
    cr_assert_str_eq(p.err_ctx_val[0], "stopped");
    cl_proc_context(&p, "a", "1");
    cl_proc_context(&p, "b", "2");
    cr_assert_eq(p.err_nctx, CL_PROC_CTX_MAX);
    cr_assert_str_eq(p.err_ctx_key[3], "a");
    /* A new failure drops the pairs of the last one. */
    cl_proc_fail(&p, SBX_ERROR_TIMEOUT, 0, "http_status", "504", "late");
    cr_assert_eq(p.err_nctx, 1);
    cr_assert_str_eq(p.err_ctx_key[0], "http_status");
    cr_assert_str_eq(p.err_ctx_val[0], "504");
    cl_sandbox_clear(&s);
    pthread_mutex_destroy(&p.lock);
}

Test(provider, client_config_http_configure_and_refuse)
{
    json_object *cfg = (json_object *)1;
    cr_assert_eq(cl_client_config(NULL, "acme", &cfg, NULL), 0);
    cr_assert_null(cfg);
    cr_assert_eq(cl_client_config("", "acme", &cfg, NULL), 0);
    cr_assert_null(cfg);
    cr_assert_eq(cl_client_config("[1]", "acme", &cfg, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme client options must be a JSON object");
    cr_assert_eq(cl_client_config("{\"retries\":\"many\"}", "acme", &cfg, NULL), 0);
    cr_assert_not_null(cfg);

    cl_http *h = cl_http_new();
    cr_assert_not_null(h);
    static const char *const envs[] = { "SBX_TEST_PROVIDER_KEY", NULL };
    setenv("SBX_TEST_PROVIDER_KEY", "k-123", 1);
    cr_assert_eq(cl_http_configure(h, cfg, envs, "Authorization", "Bearer ", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert(strstr(cl_last()->msg, "retries") != NULL, "%s", cl_last()->msg);
    json_object_put(cfg);
    cr_assert_eq(cl_http_configure(h, NULL, envs, "Authorization", "Bearer ", NULL), 0);
    unsetenv("SBX_TEST_PROVIDER_KEY");
    cr_assert_eq(cl_http_configure(h, NULL, envs, "X-API-Key", NULL, NULL), 0);
    cl_http_free(h);

    cl_refuse(NULL, "acme", "gpu", "A100", "acme has no GPUs");
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: gpu A100: acme has no GPUs");
    cl_refuse(NULL, "acme", "app_name", NULL, "acme has no apps");
    cr_assert_str_eq(cl_last()->msg, "acme backend: app_name: acme has no apps");
}

/* The item URL; the calls on it go through the hosted suites (is_alive,
 * destroy); here, a URL that could not be made. */
Test(provider, item_url_and_calls_without_one)
{
    char *u = cl_item_url("http://127.0.0.1:1/api", "sandboxes", "a b/c", "/connect");
    cr_assert_str_eq(u, "http://127.0.0.1:1/api/sandboxes/a%20b%2Fc/connect");
    free(u);
    long st = -1;
    cr_assert_null(cl_get_json(NULL, NULL, NULL, &st, "is_alive", "get the sandbox", NULL));
    cr_assert_eq(st, 0);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_eq(cl_delete_url(NULL, NULL, NULL, "destroy", "delete the sandbox", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
}

/* The multipart body: the text fields, then the file's bytes exactly (CR,
 * LF and NUL included), one random boundary named in the Content-Type. */
Test(provider, multipart_body_holds_fields_and_file_exactly)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    static const char data[] = "a\r\nb\0c--";
    cr_assert_eq(write(fds[1], data, sizeof data - 1), (ssize_t)(sizeof data - 1));
    close(fds[1]);
    const char *const fields[] = { "path", "/tmp/x y", NULL };
    cl_buf b = { 0 };
    char ct[80];
    cr_assert_eq(cl_multipart_body(&b, ct, sizeof ct, fields, "file", "f.bin", fds[0], "x",
                                   "write_file", NULL), 0);
    close(fds[0]);
    cr_assert_eq(strncmp(ct, "multipart/form-data; boundary=sbx-form-", 39), 0, "%s", ct);
    const char *bnd = ct + 30;
    cr_assert_eq(strlen(bnd), 33);
    char want[1024];
    int n = snprintf(want, sizeof want,
                     "--%s\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n/tmp/x y\r\n"
                     "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.bin\""
                     "\r\nContent-Type: application/octet-stream\r\n\r\n", bnd, bnd);
    memcpy(want + n, data, sizeof data - 1);
    n += (int)(sizeof data - 1);
    n += snprintf(want + n, sizeof want - (size_t)n, "\r\n--%s--\r\n", bnd);
    cr_assert_eq(b.len, (size_t)n);
    cr_assert_eq(memcmp(b.data, want, (size_t)n), 0);
    cl_buf_clear(&b);
    /* A descriptor that cannot be read names what it was for. */
    cr_assert_eq(cl_multipart_body(&b, ct, sizeof ct, NULL, "file", "f", -1, "/w/out.txt",
                                   "write_file", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "cannot read the data for /w/out.txt: Bad file descriptor");
    cl_buf_clear(&b);
}

/* A form's frame: the text fields in order, the file field's headers; the
 * closing boundary and the Content-Type name the same random boundary. */
Test(provider, form_frame_names_one_boundary)
{
    const char *const fields[] = { "permissions", "0755", "mode", "x", NULL };
    cl_form f = { 0 };
    cr_assert_eq(cl_form_begin(&f, fields, "file", "upload"), 0);
    cr_assert_eq(strncmp(f.ctype, "multipart/form-data; boundary=sbx-form-", 39), 0, "%s",
                 f.ctype);
    const char *bnd = f.ctype + 30;
    cr_assert_eq(strlen(bnd), 33);
    char want[512];
    snprintf(want, sizeof want,
             "--%s\r\nContent-Disposition: form-data; name=\"permissions\"\r\n\r\n0755\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"mode\"\r\n\r\nx\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"upload\""
             "\r\nContent-Type: application/octet-stream\r\n\r\n", bnd, bnd, bnd);
    cr_assert_str_eq(f.head.data, want);
    cr_assert_eq(f.head.len, strlen(want));
    snprintf(want, sizeof want, "\r\n--%s--\r\n", bnd);
    cr_assert_str_eq(f.tail, want);
    cr_assert_eq(f.tail_len, 41);
    cl_form_clear(&f);
    cr_assert_null(f.head.data);
    cr_assert_eq(f.tail_len, 0);
    /* No fields: the file field alone. */
    cr_assert_eq(cl_form_begin(&f, NULL, "file", "file"), 0);
    bnd = f.ctype + 30;
    snprintf(want, sizeof want,
             "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\""
             "\r\nContent-Type: application/octet-stream\r\n\r\n", bnd);
    cr_assert_str_eq(f.head.data, want);
    cl_form_clear(&f);
}

/* Reads a cl_fd_body to its end in reads of at most @cap bytes. */
static ssize_t fd_body_all(cl_fd_body *m, char *out, size_t max, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = cl_fd_body_read(m, out + n, cap < max - n ? cap : max - n);
        if (k <= 0)
            return k < 0 ? -1 : (ssize_t)n;
        n += (size_t)k;
    }
}

/* A body streamed from a descriptor: head, the bytes, tail, in any size of
 * read; spooled, it is read again from its start, the bytes from the
 * spool; unspooled, it cannot be. */
Test(provider, fd_body_streams_and_rewinds_from_its_spool)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    static const char data[] = "one\0two\r\nthree";
    cr_assert_eq(write(fds[1], data, sizeof data - 1), (ssize_t)(sizeof data - 1));
    close(fds[1]);
    static const char want[] = "HEAD:one\0two\r\nthree:TAIL";
    cl_fd_body m;
    cl_fd_body_init(&m, "HEAD:", 5, ":TAIL", 5, fds[0], 1, "stdin", "exec");
    cr_assert_not_null(m.spool);
    char out[64];
    cr_assert_eq(fd_body_all(&m, out, sizeof out, 3), (ssize_t)(sizeof want - 1));
    cr_assert_eq(memcmp(out, want, sizeof want - 1), 0);
    cr_assert_eq(cl_fd_body_rewind(&m), 0);
    memset(out, 0, sizeof out);
    cr_assert_eq(fd_body_all(&m, out, sizeof out, 64), (ssize_t)(sizeof want - 1));
    cr_assert_eq(memcmp(out, want, sizeof want - 1), 0);
    cl_fd_body_clear(&m);
    cr_assert_null(m.spool);
    cr_assert_eq(cl_fd_body_rewind(&m), -1);
    close(fds[0]);
    /* Unspooled: read once; no rewind. */
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(write(fds[1], "ab", 2), 2);
    close(fds[1]);
    cl_fd_body_init(&m, "<", 1, ">", 1, fds[0], 0, "the file", "write_file");
    cr_assert_null(m.spool);
    cr_assert_eq(fd_body_all(&m, out, sizeof out, 1), 4);
    cr_assert_eq(memcmp(out, "<ab>", 4), 0);
    cr_assert_eq(cl_fd_body_rewind(&m), -1);
    cl_fd_body_clear(&m);
    close(fds[0]);
}

static int infos_seen(const sbx_plugin_file_info *info, void *ud)
{
    cl_buf *b = ud;
    cl_buf_printf(b, "%s:%d:%lld:%o;", info->name, info->is_dir, (long long)info->size,
                  (unsigned)info->mode);
    return strcmp(info->name, "stop") == 0;
}

/* A JSON listing's entries: name, directory flag (or all directories),
 * size (-1 for a directory or when missing), mode from octal digits;
 * entries without a name passed over; the callback's non-zero ends it. */
Test(provider, file_infos_from_a_json_listing)
{
    json_object *a = json_tokener_parse(
        "[{\"name\":\"f\",\"size\":12,\"isDir\":false,\"permissions\":\"100644\"},"
        "{\"name\":\"d\",\"size\":4096,\"isDir\":true,\"permissions\":\"755\"},"
        "{\"size\":3},{\"name\":\"n\"},{\"name\":\"stop\",\"size\":\"7\"},{\"name\":\"after\"}]");
    cr_assert_not_null(a);
    cl_buf b = { 0 };
    cr_assert_eq(cl_file_infos_json(a, "isDir", 0, "permissions", infos_seen, &b), 1);
    cr_assert_str_eq(b.data, "f:0:12:644;d:1:-1:755;n:0:-1:0;stop:0:7:0;");
    cl_buf_clear(&b);
    cr_assert_eq(cl_file_infos_json(a, NULL, 1, NULL, infos_seen, &b), 1);
    cr_assert_str_eq(b.data, "f:1:-1:0;d:1:-1:0;n:1:-1:0;stop:1:-1:0;");
    cl_buf_clear(&b);
    sbx_plugin_file_info one = cl_file_info_json(json_object_array_get_idx(a, 0), "isDir", 0,
                                                 NULL);
    cr_assert_eq(one.struct_size, sizeof one);
    cr_assert_str_eq(one.name, "f");
    cr_assert_eq(one.size, 12);
    cr_assert_eq(one.mode, 0);
    json_object *o = json_object_new_object();
    cr_assert_eq(cl_file_infos_json(o, "isDir", 0, NULL, infos_seen, &b), 0);
    cr_assert_eq(cl_file_infos_json(NULL, "isDir", 0, NULL, infos_seen, &b), 0);
    cr_assert_null(b.data);
    json_object_put(o);
    json_object_put(a);
}

static int sse_seen(void *ud, const char *event, const char *data, size_t n, const char *id)
{
    (void)id;
    cl_buf_printf(ud, "%s=%.*s;", event, (int)n, data);
    return strcmp(data, "end") == 0;
}

/* The readers' sinks feed the reader they are given, and fail as it does. */
Test(provider, reader_sinks_feed_their_reader)
{
    cl_buf b = { 0 };
    cl_sse s;
    cl_sse_init(&s, sse_seen, &b);
    cr_assert_eq(cl_sse_sink(&s, "event: out\nda", 13), 0);
    cr_assert_eq(cl_sse_sink(&s, "ta: x\n\ndata: end\n\n", 18), 0);
    cr_assert_str_eq(b.data, "out=x;message=end;");
    cr_assert_eq(cl_sse_end(&s, "exec", NULL), 0);
    cl_sse_clear(&s);
    cl_buf_clear(&b);
    cl_ndjson nd;
    cl_ndjson_init(&nd, NULL, NULL);
    cr_assert_eq(cl_ndjson_sink(&nd, "not json\n", 9), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cl_ndjson_clear(&nd);
    cl_connect cc;
    cl_connect_init(&cc, NULL, NULL);
    static const char compressed[] = { 0x01, 0, 0, 0, 0 };
    cr_assert_eq(cl_connect_sink(&cc, compressed, sizeof compressed), -1);
    cr_assert_str_eq(cl_last()->msg,
                     "the Connect stream sent a compressed message (none was asked for)");
    cl_connect_clear(&cc);
}

/* A plugin's sandbox struct around its head: zeroed, the id copied; the
 * string members of a constructor copied (NULL stays NULL). */
typedef struct wide_sandbox {
    cl_sandbox s;
    void *client;
    char *url;
    char *workdir;
    int flag;
} wide_sandbox;

Test(provider, sandbox_alloc_dup_and_free)
{
    wide_sandbox *w = cl_sandbox_alloc(sizeof(*w), "sb-7");
    cr_assert_not_null(w);
    cr_assert_str_eq(w->s.id, "sb-7");
    cr_assert_eq(cl_gone_get(&w->s.gone), 0);
    cr_assert_null(w->client);
    cr_assert_null(w->url);
    cr_assert_eq(w->flag, 0);
    cr_assert_eq(cl_dup(&w->url, "http://x"), 0);
    cr_assert_str_eq(w->url, "http://x");
    w->workdir = (char *)"not freed";
    cr_assert_eq(cl_dup(&w->workdir, NULL), 0);
    cr_assert_null(w->workdir);
    free(w->url);
    cl_sandbox_free(w);
    cl_sandbox_free(NULL);
}

/* The constructor with the head's client and workdir: both set, the
 * workdir copied and freed with the head; "" and NULL are no workdir. */
Test(provider, sandbox_new_sets_client_and_workdir)
{
    char wd[] = "/home/user/w";
    wide_sandbox *w = cl_sandbox_new(sizeof(*w), (sbx_plugin_client *)wd, "sb-8", wd);
    cr_assert_not_null(w);
    cr_assert_str_eq(w->s.id, "sb-8");
    cr_assert_eq((void *)w->s.c, (void *)wd);
    cr_assert_str_eq(w->s.workdir, "/home/user/w");
    cr_assert_neq(w->s.workdir, wd);
    cr_assert_null(w->url);
    cl_sandbox_free(w);
    w = cl_sandbox_new(sizeof(*w), NULL, "sb-9", "");
    cr_assert_not_null(w);
    cr_assert_null(w->s.c);
    cr_assert_null(w->s.workdir);
    cl_sandbox_free(w);
    w = cl_sandbox_new(sizeof(*w), NULL, "sb-10", NULL);
    cr_assert_null(w->s.workdir);
    cl_sandbox_free(w);
}

/* The session state's start: the gone check, then version, id and
 * workdir (when the head has one; it is freed with the head). */
Test(provider, state_new_holds_version_id_and_workdir)
{
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "pod-1"), 0);
    cr_assert_null(s.workdir);
    s.workdir = strdup("/w");
    json_object *j = cl_state_new(&s, "acme", 2, "pod", NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN
                                                       | JSON_C_TO_STRING_NOSLASHESCAPE),
                     "{\"version\":2,\"pod\":\"pod-1\",\"workdir\":\"/w\"}");
    json_object_put(j);
    free(s.workdir);
    s.workdir = NULL;
    j = cl_state_new(&s, "acme", 1, "sandbox_id", NULL);
    cr_assert_str_eq(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN),
                     "{\"version\":1,\"sandbox_id\":\"pod-1\"}");
    json_object_put(j);
    cr_assert_null(cl_state_end(NULL, NULL));
    cl_gone_set(&s.gone);
    cr_assert_null(cl_state_new(&s, "acme", 1, "sandbox_id", NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox pod-1 is gone (the provider no longer has it)");
    cl_sandbox_clear(&s);
}

/* The create's working directory: none for NULL and ""; else made through
 * the runner and kept; a failed mkdir keeps nothing. */
Test(provider, create_workdir_makes_and_keeps_it)
{
    sbx_plugin_sandbox sb = { 0 };
    char *slot = NULL;
    cr_assert_eq(cl_create_workdir(&sb, &slot, run, NULL, "acme", NULL, "create", NULL), 0);
    cr_assert_eq(cl_create_workdir(&sb, &slot, run, NULL, "acme", "", "create", NULL), 0);
    cr_assert_str_eq(sb.cmd, "");
    cr_assert_null(slot);
    cr_assert_eq(cl_create_workdir(&sb, &slot, run, NULL, "acme", "/w o", "create", NULL), 0);
    cr_assert_str_eq(sb.cmd, "mkdir -p -- '/w o'");
    cr_assert_str_eq(slot, "/w o");
    free(slot);
    slot = NULL;
    sb.code = 1;
    cr_assert_eq(cl_create_workdir(&sb, &slot, run, NULL, "acme", "/x", "create", NULL), -1);
    cr_assert_null(slot);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme: cannot make the working directory /x (mkdir exited 1)");
}

typedef struct listed {
    int n, stop_at;
    char names[4][32];
    int dirs[4];
    int64_t sizes[4];
} listed;

static int list_one(const sbx_plugin_file_info *info, void *ud)
{
    listed *l = ud;
    snprintf(l->names[l->n], sizeof l->names[0], "%s", info->name);
    l->dirs[l->n] = info->is_dir;
    l->sizes[l->n] = info->size;
    return ++l->n == l->stop_at;
}

/* A directory listed by a find command: its exact text; the answer's
 * entries (a line without two spaces is passed over), the stop a callback
 * asks for, and the errors of a missing directory and of find. */
Test(provider, list_command_and_its_answer)
{
    char *cmd = cl_list_command("/a b");
    cr_assert_str_eq(cmd, "test -d '/a b' || exit 3; find '/a b' -mindepth 1 -maxdepth 1 "
                          "-printf '%y %s %f\\n'");
    free(cmd);
    char out[] = "d 4096 sub\nf 12 a file\nbroken\nf 0 e\n";
    listed l = { 0 };
    cr_assert_eq(cl_list_answer(0, out, "x", list_one, &l, "list_files", NULL), 0);
    cr_assert_eq(l.n, 3);
    cr_assert_str_eq(l.names[0], "sub");
    cr_assert_eq(l.dirs[0], 1);
    cr_assert_eq(l.sizes[0], -1);
    cr_assert_str_eq(l.names[1], "a file");
    cr_assert_eq(l.dirs[1], 0);
    cr_assert_eq(l.sizes[1], 12);
    cr_assert_str_eq(l.names[2], "e");
    cr_assert_eq(l.sizes[2], 0);
    char out2[] = "f 1 a\nf 2 b\n";
    listed l2 = { .stop_at = 1 };
    cr_assert_eq(cl_list_answer(0, out2, "x", list_one, &l2, "list_files", NULL), 0);
    cr_assert_eq(l2.n, 1);
    cr_assert_eq(cl_list_answer(3, NULL, "rel/d", list_one, &l, "list_files", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "no such directory in the sandbox: rel/d");
    cr_assert_eq(cl_list_answer(1, NULL, "rel/d", list_one, &l, "list_files", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "cannot list rel/d (find exited 1)");
}

/* An error as the recording host below makes it: its context pairs. */
struct sbx_error {
    char pairs[256];    /* "k=v;" for each context pair, in order */
};

static void rec_set_error(sbx_error **error, sbx_error_code code, const char *op,
                          const char *fmt, ...)
{
    (void)code;
    (void)op;
    (void)fmt;
    *error = calloc(1, sizeof(**error));
}

static void rec_add_context(sbx_error *e, const char *key, const char *value)
{
    size_t k = strlen(e->pairs);
    snprintf(e->pairs + k, sizeof e->pairs - k, "%s=%s;", key, value);
}

static const sbx_host_services rec_host = { .struct_size = sizeof(sbx_host_services),
                                            .set_error = rec_set_error,
                                            .error_add_context = rec_add_context };

/* Marking a sandbox gone sets its flag and gives the gone error, with its
 * context, also stored in *error; every later check fails the same way. */
Test(provider, gone_mark)
{
    cl_host = &rec_host;
    cl_gone g;
    cl_gone_init(&g);
    sbx_error *err = NULL;
    cr_assert_eq(cl_gone_mark(&g, &err, "exec", "acme", "sb-2"), err);
    cr_assert_not_null(err);
    cr_assert_str_eq(err->pairs, "sandbox_id=sb-2;reason=gone;");
    free(err);
    cr_assert_eq(cl_gone_get(&g), 1);
    cl_host = NULL;
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-2 is gone (the provider no longer has it)");
    cl_gone_mark(&g, NULL, "stop", "acme", "sb-3");
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-3 is gone (the provider no longer has it)");
    cr_assert_eq(cl_gone_check(&g, "exec", "acme", "sb-2", NULL), -1);
    cl_gone_destroy(&g);
}

/* The gone error with the provider's view: the members named that the
 * view holds as strings, in order, "status" as "state"; none without a
 * view. */
Test(provider, gone_error_view)
{
    cl_host = &rec_host;
    static const char *const keys[] = { "status", "failure_reason", "shutdown_reason", NULL };
    json_object *view = json_tokener_parse("{\"status\":\"failure\",\"failure_reason\":"
                                           "\"out_of_memory\",\"shutdown_reason\":7}");
    sbx_error *err = NULL;
    cr_assert_eq(cl_gone_error_view(&err, "exec", "acme", "dbx-1", view, keys), err);
    cr_assert_str_eq(err->pairs, "sandbox_id=dbx-1;reason=gone;state=failure;"
                                 "failure_reason=out_of_memory;");
    free(err);
    err = NULL;
    cl_gone_error_view(&err, "exec", "acme", "dbx-1", NULL, keys);
    cr_assert_str_eq(err->pairs, "sandbox_id=dbx-1;reason=gone;");
    free(err);
    cl_host = NULL;
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox dbx-1 is gone (the provider no longer has it)");
    json_object_put(view);
}

/* A stand-in delete for the undo of a create: counts its calls, checks
 * that it gets no deadline and no error to fill, the sandbox's id and the
 * create's op, and fails (its error is not the create's). */
static int undo_deletes;

static int undo_del(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                    const char *op, sbx_error **error)
{
    (void)client;
    cr_assert_null(ctx);
    cr_assert_null(error);
    cr_assert_str_eq(id, "sb-9");
    cr_assert_str_eq(op, "create");
    undo_deletes++;
    return -1;
}

static int undo_frees;

static void undo_free(sbx_plugin_sandbox *sb)
{
    undo_frees++;
    cl_sandbox_free(sb);
}

/* The undo of a create: the sandbox deleted once each time, the struct
 * freed by the plugin's free; no struct is out of memory unless a step's
 * error stands; the sandbox's id added to the error only when asked. */
Test(provider, create_undo_deletes_frees_and_names_the_sandbox)
{
    cl_host = &rec_host;
    sbx_error *err = NULL;
    cr_assert_null(cl_create_undo(NULL, NULL, undo_del, "sb-9", 0, undo_free, "create", &err));
    cr_assert_not_null(err);
    cr_assert_str_eq(err->pairs, "");
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(cl_last()->msg, "out of memory");
    cr_assert_eq(undo_deletes, 1);
    cr_assert_eq(undo_frees, 0);
    sbx_error *first = err;
    cr_assert_null(cl_create_undo(NULL, NULL, undo_del, "sb-9", 1, undo_free, "create", &err));
    cr_assert_eq(err, first);
    cr_assert_str_eq(err->pairs, "sandbox_id=sb-9;");
    cr_assert_eq(undo_deletes, 2);
    free(err);
    err = NULL;
    cl_fail(&err, SBX_ERROR_TIMEOUT, "create", "the sandbox did not start");
    sbx_plugin_sandbox *sb = cl_sandbox_alloc(sizeof(*sb), "sb-9");
    cr_assert_not_null(sb);
    cr_assert_null(cl_create_undo(sb, NULL, undo_del, "sb-9", 1, undo_free, "create", &err));
    cr_assert_str_eq(err->pairs, "sandbox_id=sb-9;");
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_eq(undo_deletes, 3);
    cr_assert_eq(undo_frees, 1);
    free(err);
    err = NULL;
    cl_fail(&err, SBX_ERROR_TIMEOUT, "create", "the workdir was not made");
    sb = cl_sandbox_alloc(sizeof(*sb), "sb-9");
    cr_assert_null(cl_create_undo(sb, NULL, undo_del, "sb-9", 0, NULL, "create", &err));
    cr_assert_str_eq(err->pairs, "");
    cr_assert_eq(undo_deletes, 4);
    cr_assert_eq(undo_frees, 1);
    free(err);
    cl_host = NULL;
}

/* A stand-in cl_run_out_fn: keeps the command, answers sb->code and a
 * listing of two entries. */
static int run_out(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *cmd, int *code,
                   char **out, const char *op, sbx_error **error)
{
    (void)ctx;
    (void)op;
    (void)error;
    snprintf(sb->cmd, sizeof sb->cmd, "%s", cmd);
    *code = sb->code;
    *out = strdup("d 4096 sub\nf 5 a b\n");
    return 0;
}

/* list_files by a command: the path made absolute against the directory
 * given, each entry seen; a missing directory named as the caller gave
 * it. */
Test(provider, list_files_run)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-6"), 0);
    listed l = { 0 };
    cr_assert_eq(cl_list_files_run(&sb, NULL, "/home/u", "d x", run_out, list_one, &l, NULL),
                 0);
    cr_assert_str_eq(sb.cmd, "test -d '/home/u/d x' || exit 3; find '/home/u/d x' -mindepth 1 "
                             "-maxdepth 1 -printf '%y %s %f\\n'");
    cr_assert_eq(l.n, 2);
    cr_assert_str_eq(l.names[0], "sub");
    cr_assert_eq(l.dirs[0], 1);
    cr_assert_str_eq(l.names[1], "a b");
    cr_assert_eq(l.sizes[1], 5);
    sb.code = 3;
    cr_assert_eq(cl_list_files_run(&sb, NULL, NULL, "/abs", run_out, list_one, &l, NULL), -1);
    cr_assert_str_eq(sb.cmd, "test -d '/abs' || exit 3; find '/abs' -mindepth 1 -maxdepth 1 "
                             "-printf '%y %s %f\\n'");
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "no such directory in the sandbox: /abs");
    cl_sandbox_clear(&sb.s);
}

/* A stand-in cl_download_fn: keeps the path; "/w/there" answers its
 * bytes, anything else a 404. */
static int download(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                    cl_sink_fn sink, void *ud, cl_resp *r, const char *op, sbx_error **error)
{
    (void)ctx;
    (void)op;
    (void)error;
    snprintf(sb->cmd, sizeof sb->cmd, "%s", path);
    if (strcmp(path, "/w/there") != 0) {
        r->status = 404;
        return -1;
    }
    r->status = 200;
    return sink(ud, "a\0b", 3) < 0 ? -1 : 0;
}

/* read_file over a download: the path made absolute against the directory
 * given, the bytes exact in the descriptor; a file the answer says is not
 * there is not_found naming the caller's path. */
Test(provider, read_file_by)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-7"), 0);
    cl_http *h = cl_http_new();
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(cl_read_file_by(&sb, h, NULL, "/w", "there", download, fds[1], NULL), 0);
    cr_assert_str_eq(sb.cmd, "/w/there");
    close(fds[1]);
    char buf[8];
    cr_assert_eq(read(fds[0], buf, sizeof buf), 3);
    cr_assert_eq(memcmp(buf, "a\0b", 3), 0);
    close(fds[0]);
    cr_assert_eq(cl_read_file_by(&sb, h, NULL, "/w", "/etc/none", download, -1, NULL), -1);
    cr_assert_str_eq(sb.cmd, "/etc/none");
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "no such file in the sandbox: /etc/none");
    cr_assert_eq(cl_read_file_by(&sb, h, NULL, "/w", "gone", download, -1, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "no such file in the sandbox: gone");
    cl_http_free(h);
    cl_sandbox_clear(&sb.s);
}

Test(provider, token_ids_match_only_their_token)
{
    cl_token_ids t = { "sbx-1", { 0 } };
    cr_assert_eq(cl_token_ids_match(&t, "sbx-1", "a"), 0);
    cr_assert_eq(cl_token_ids_match(&t, "sbx-2", "b"), 0);
    cr_assert_eq(cl_token_ids_match(&t, NULL, "c"), 0);
    cr_assert_eq(cl_token_ids_match(&t, "sbx-1", "d"), 0);
    char **ids = NULL;
    cr_assert_eq(cl_ids_finish(&t.ids, 0, &ids, "create", NULL), 0);
    cr_assert_str_eq(ids[0], "a");
    cr_assert_str_eq(ids[1], "d");
    cr_assert_null(ids[2]);
    cl_strv_free(ids);
}

typedef struct reaped {
    pthread_mutex_t lock;
    int finds, deletes;
    char token[64], deleted[64];
} reaped;

static int reap_find(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                     sbx_error **error)
{
    reaped *r = ud;
    (void)ctx;
    (void)error;
    pthread_mutex_lock(&r->lock);
    r->finds++;
    snprintf(r->token, sizeof r->token, "%s", token);
    int first = r->deletes == 0;
    pthread_mutex_unlock(&r->lock);
    cl_ids s = { 0 };
    if (first)
        cl_ids_add(&s, "sb-lost");
    return cl_ids_finish(&s, 0, ids, "create", NULL);
}

static int reap_delete(void *ud, const sbx_call_ctx *ctx, const char *id, sbx_error **error)
{
    reaped *r = ud;
    (void)ctx;
    (void)error;
    pthread_mutex_lock(&r->lock);
    r->deletes++;
    snprintf(r->deleted, sizeof r->deleted, "%s", id);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* A create that got no answer: its error again (cancelled at the passed
 * deadline made timeout), outcome unknown, and the sandbox carrying its
 * token looked for at once and deleted; an error whose outcome is known
 * (the request never left) looks for nothing. */
Test(provider, create_unanswered_reaps_by_token)
{
    reaped r = { .lock = PTHREAD_MUTEX_INITIALIZER };
    cl_reaper *reaper = cl_reaper_new(reap_find, reap_delete, &r);
    cr_assert_not_null(reaper);
    sbx_call_ctx past = { sizeof(past), cl_now() - 1, -1, NULL };
    cl_fail(NULL, SBX_ERROR_CANCELLED, "create", "create the sandbox: cancelled");
    cl_outcome_unknown(NULL);
    cl_create_unanswered(reaper, &past, "sbx-0123", "create", NULL);
    pthread_mutex_lock(&r.lock);
    cr_assert_eq(r.deletes, 1);
    cr_assert_str_eq(r.deleted, "sb-lost");
    cr_assert_str_eq(r.token, "sbx-0123");
    pthread_mutex_unlock(&r.lock);

    cl_fail(NULL, SBX_ERROR_CONNECTION, "create", "create the sandbox: refused");
    cl_create_unanswered(reaper, NULL, "sbx-4567", "create", NULL);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_eq(cl_last()->unknown, 0);
    cr_assert_str_eq(cl_last()->msg, "create the sandbox: refused");
    pthread_mutex_lock(&r.lock);
    cr_assert_str_eq(r.token, "sbx-0123");
    pthread_mutex_unlock(&r.lock);
    cl_reaper_free(reaper);
}

/* The plugin's own delete, as a reaper over it calls it: the op it is
 * given and the id. */
static char reap_op[32];

static int reap_delete_op(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                          const char *op, sbx_error **error)
{
    snprintf(reap_op, sizeof reap_op, "%s", op);
    return reap_delete(client, ctx, id, error);
}

/* A reaper over the plugin's delete: called with op "create" on what the
 * look found. */
Test(provider, reaper_over_the_plugins_delete)
{
    reaped r = { .lock = PTHREAD_MUTEX_INITIALIZER };
    cl_reaper *reaper = cl_reaper_new_op(reap_find, reap_delete_op, (sbx_plugin_client *)&r);
    cr_assert_not_null(reaper);
    cr_assert_eq(cl_reap_now(reaper, NULL, "sbx-89ab", 1.0), 1);
    pthread_mutex_lock(&r.lock);
    cr_assert_eq(r.deletes, 1);
    cr_assert_str_eq(r.deleted, "sb-lost");
    cr_assert_str_eq(r.token, "sbx-89ab");
    pthread_mutex_unlock(&r.lock);
    cr_assert_str_eq(reap_op, "create");
    cl_reaper_free(reaper);
}

/* The error itself: the code and message the request gave, made timeout
 * when the call's deadline cancelled it. */
Test(provider, create_unanswered_error)
{
    cl_fail(NULL, SBX_ERROR_CANCELLED, "create", "create the sandbox: cancelled");
    cl_outcome_unknown(NULL);
    cl_create_unanswered(NULL, NULL, NULL, "create", NULL);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CANCELLED);
    cr_assert_eq(cl_last()->unknown, 1);
    sbx_call_ctx past = { sizeof(past), cl_now() - 1, -1, NULL };
    cl_fail(NULL, SBX_ERROR_CANCELLED, "create", "create the sandbox: cancelled");
    cl_outcome_unknown(NULL);
    cl_create_unanswered(NULL, &past, NULL, "create", NULL);
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_eq(cl_last()->unknown, 1);
    cr_assert_str_eq(cl_last()->msg, "create the sandbox: cancelled");
}

/* A host whose memory is malloc's: the slots that answer in host memory. */
static const sbx_host_services malloc_host = { .struct_size = sizeof(sbx_host_services),
                                               .alloc = malloc, .free = free };

/* The port slots of a provider that routes every port itself: the set is
 * kept ascending, once each; the create's ports are added; resolve's
 * start says which port is not exposed; a gone sandbox fails each slot
 * naming the backend. */
Test(provider, port_slots_keep_the_exposed_set)
{
    cl_host = &malloc_host;
    cl_backend = "acme";
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_sandbox_init(&sb.s, "sb-7"), 0);
    static const uint16_t asked[] = { 8080, 3000 };
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq), .ports = asked, .n_ports = 2 };
    cr_assert_eq(cl_ports_from_request(&sb.s, &rq, "create", NULL), 0);
    cr_assert_eq(cl_expose_port(&sb, NULL, 5432, NULL), 0);
    cr_assert_eq(cl_expose_port(&sb, NULL, 3000, NULL), 0);
    char *l = cl_list_ports(&sb, NULL, NULL);
    cr_assert_str_eq(l, "3000 5432 8080");
    free(l);
    cr_assert_eq(cl_unexpose_port(&sb, NULL, 5432, NULL), 0);
    cr_assert_eq(cl_unexpose_port(&sb, NULL, 9, NULL), 0);
    l = cl_list_ports(&sb, NULL, NULL);
    cr_assert_str_eq(l, "3000 8080");
    free(l);
    cr_assert_eq(cl_port_resolvable(&sb.s, 8080, NULL), 0);
    cr_assert_eq(cl_port_resolvable(&sb.s, 5432, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-7: port 5432 is not exposed");
    char *dup = cl_host_strdup("https://3000-sb-7.example", "resolve_port", NULL);
    cr_assert_str_eq(dup, "https://3000-sb-7.example");
    free(dup);
    cr_assert_null(cl_host_strdup(NULL, "resolve_port", NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);

    cl_gone_set(&sb.s.gone);
    cr_assert_eq(cl_expose_port(&sb, NULL, 1, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-7 is gone (the provider no longer has it)");
    cr_assert_eq(cl_unexpose_port(&sb, NULL, 3000, NULL), -1);
    cr_assert_null(cl_list_ports(&sb, NULL, NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_eq(cl_port_resolvable(&sb.s, 8080, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-7 is gone (the provider no longer has it)");
    cl_sandbox_clear(&sb.s);
    cl_host = NULL;
}

/* The create's refusals by table: the first option given, in the table's
 * order, with its value as the message shows it; none given is 0. */
Test(provider, refuse_options_by_table)
{
    static const cl_unsupported table[] = {
        { "cpu", "from the template" }, { "memory_mb", "from the template" },
        { "disk_mb", "fixed" }, { "gpu", "no GPUs" }, { "image", "no images" },
        { "template", "no templates" }, { "snapshot_id", "no snapshots" },
        { "app_name", "no apps" }, { "allow_internet", "no policy" }, { NULL, NULL },
    };
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq), .allow_internet = 1 };
    cr_assert_eq(cl_refuse_options(&rq, "acme", table, NULL), 0);
    rq.gpu = "";
    cr_assert_eq(cl_refuse_options(&rq, "acme", table, NULL), 0);
    rq.app_name = "web";
    rq.image = "debian:12";
    cr_assert_eq(cl_refuse_options(&rq, "acme", table, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: image debian:12: no images");
    rq.set_fields = SBX_OPTION_DISK_MB | SBX_OPTION_MEMORY_MB;
    rq.memory_mb = 3072;
    rq.disk_mb = 20480;
    cr_assert_eq(cl_refuse_options(&rq, "acme", table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend: memory_mb 3072: from the template");
    rq.set_fields |= SBX_OPTION_CPU;
    rq.cpu = 1.5;
    cr_assert_eq(cl_refuse_options(&rq, "acme", table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend: cpu 1.5: from the template");
    cr_assert_eq(cl_refuse_options(&rq, "acme", table + 2, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend: disk_mb 20480: fixed");
    cr_assert_eq(cl_refuse_options(&rq, "acme", table + 7, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend: app_name web: no apps");
    rq.app_name = NULL;
    cr_assert_eq(cl_refuse_options(&rq, "acme", table + 7, NULL), 0);
    rq.allow_internet = 0;
    cr_assert_eq(cl_refuse_options(&rq, "acme", table + 7, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend: allow_internet false: no policy");
    static const cl_unsupported bad[] = { { "colour", "?" }, { NULL, NULL } };
    cr_assert_eq(cl_refuse_options(&rq, "acme", bad, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no such create option to refuse: colour");
}

/* cl_limits_check()'s refusal of @rq by @table ("acme" backend): its
 * message, or "" when every value is taken. */
static const char *limits_refusal(const sbx_plugin_create_request *rq, const cl_limit *table)
{
    return cl_limits_check(rq, "acme", table, NULL) == 0 ? "" : cl_last()->msg;
}

/* The create's number options by table: only those set (or always), in
 * the table's order; each bound (above, at least, at most, step, 0 as
 * none) refuses with its value as the message shows it and the context
 * keys the entry names; a table naming another option is to fix. */
Test(provider, limits_by_table)
{
    static const cl_limit table[] = {
        { "cpu", 0, 8, 0, CL_LIMIT_ABOVE, "more than 0, at most 8", NULL, "max", NULL },
        { "memory_mb", 1024, 16384, 1024, 0, "whole GB", "min_mb", "max_mb", "step_mb" },
        { "disk_mb", 1, 4096, 0, CL_LIMIT_ZERO_NONE, "1 to 4096", NULL, NULL, NULL },
        { "timeout_secs", 0, 86400, 0, CL_LIMIT_ABOVE | CL_LIMIT_ALWAYS, "1 to 86400 s", NULL,
          NULL, NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    const uint64_t C = SBX_OPTION_CPU, M = SBX_OPTION_MEMORY_MB, D = SBX_OPTION_DISK_MB;
    const struct {
        uint64_t set;
        double cpu;
        int64_t memory_mb, disk_mb;
        double timeout_secs;
        const char *refusal;
    } cases[] = {
        { 0, -1, 5, -3, 300, "" },  /* not set: not looked at */
        { 0, -1, 5, -3, 0, "acme backend: timeout_secs 0: 1 to 86400 s" },
        { 0, -1, 5, -3, 86400.5, "acme backend: timeout_secs 86400.5: 1 to 86400 s" },
        { 0, -1, 5, -3, 86400, "" },
        /* The value as given, never rounded to six digits or an exponent. */
        { 0, -1, 5, -3, 86400.01, "acme backend: timeout_secs 86400.01: 1 to 86400 s" },
        { 0, -1, 5, -3, 1000000, "acme backend: timeout_secs 1000000: 1 to 86400 s" },
        { 0, -1, 5, -3, 1e20, "acme backend: timeout_secs 1e+20: 1 to 86400 s" },
        { C, 8.0000001, 5, -3, 60, "acme backend: cpu 8.0000001: more than 0, at most 8" },
        { C, 1e-7, 5, -3, 60, "" },
        { C, -1, 5, -3, 60, "acme backend: cpu -1: more than 0, at most 8" },
        { C, 0, 5, -3, 60, "acme backend: cpu 0: more than 0, at most 8" },
        { C, NAN, 5, -3, 60, "acme backend: cpu nan: more than 0, at most 8" },
        { C, 8.5, 5, -3, 60, "acme backend: cpu 8.5: more than 0, at most 8" },
        { C, 0.25, 5, -3, 60, "" },
        { C | M, 8, 5, -3, 60, "acme backend: memory_mb 5: whole GB" },
        { C | M, 8, 3000, -3, 60, "acme backend: memory_mb 3000: whole GB" },
        { C | M, 8, 17408, -3, 60, "acme backend: memory_mb 17408: whole GB" },
        { C | M, 8, 3072, -3, 60, "" },
        { C | M | D, 8, 3072, -3, 60, "acme backend: disk_mb -3: 1 to 4096" },
        { C | M | D, 8, 3072, 0, 60, "" },     /* 0: none */
        { C | M | D, 8, 3072, 4096, 60, "" },
        { C | M | D, 8, 3072, 4097, 60, "acme backend: disk_mb 4097: 1 to 4096" },
        /* The first out of bounds in the table's order. */
        { C | M | D, 8, 512, 1, -2, "acme backend: memory_mb 512: whole GB" },
    };
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq) };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rq.set_fields = cases[i].set;
        rq.cpu = cases[i].cpu;
        rq.memory_mb = cases[i].memory_mb;
        rq.disk_mb = cases[i].disk_mb;
        rq.timeout_secs = cases[i].timeout_secs;
        cr_assert_str_eq(limits_refusal(&rq, table), cases[i].refusal, "case %zu", i);
        if (*cases[i].refusal)
            cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    }
    cr_assert_eq(cl_limits_check(&rq, "acme", NULL, NULL), 0);
    static const cl_limit bad[] = { { "gpu", 0, 0, 0, 0, "?", NULL, NULL, NULL },
                                    { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL } };
    cr_assert_eq(cl_limits_check(&rq, "acme", bad, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no such number option to check: gpu");
}

/* The refusal's context: the option, and the bounds the entry names, as
 * the value is ("1024", "16384", "4294967295", never "1024.000000" or
 * "4.29497e+09"). */
Test(provider, limits_context)
{
    static const cl_limit table[] = {
        { "memory_mb", 1024, 16384, 1024, 0, "whole GB", "min_mb", "max_mb", "step_mb" },
        { "cpu", 0, 8, 0, CL_LIMIT_ABOVE, "at most 8", NULL, "max", NULL },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq), .memory_mb = 1536, .cpu = 9,
                                     .set_fields = SBX_OPTION_MEMORY_MB };
    cl_host = &rec_host;
    sbx_error *err = NULL;
    cr_assert_eq(cl_limits_check(&rq, "acme", table, &err), -1);
    cr_assert_not_null(err);
    cr_assert_str_eq(err->pairs, "option=memory_mb;min_mb=1024;max_mb=16384;step_mb=1024;");
    free(err);
    err = NULL;
    rq.set_fields = SBX_OPTION_CPU;
    cr_assert_eq(cl_limits_check(&rq, "acme", table, &err), -1);
    cr_assert_str_eq(err->pairs, "option=cpu;max=8;");
    free(err);
    cl_host = NULL;
    cr_assert_str_eq(cl_last()->msg, "acme backend: cpu 9: at most 8");
    static const cl_limit wide[] = {
        { "disk_mb", 1, UINT32_MAX, 0.5, 0, "1 to 4294967295", NULL, "max_mb", "step_mb" },
        { NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL },
    };
    rq.set_fields = SBX_OPTION_DISK_MB;
    rq.disk_mb = (int64_t)UINT32_MAX + 1;
    err = NULL;
    cl_host = &rec_host;
    cr_assert_eq(cl_limits_check(&rq, "acme", wide, &err), -1);
    cr_assert_str_eq(err->pairs, "option=disk_mb;max_mb=4294967295;step_mb=0.5;");
    free(err);
    cl_host = NULL;
    cr_assert_str_eq(cl_last()->msg, "acme backend: disk_mb 4294967296: 1 to 4294967295");
}

/* gpu "TYPE[:COUNT]": a known type, or (no list) letters, digits and '-';
 * a count from 1 to the most; anything else -1 with nothing stored. */
Test(provider, gpu_parse)
{
    static const char *const known[] = { "H100", "RTX-4090", NULL };
    /* The answer: "LEN COUNT", or "-" when refused. */
    static const struct {
        const char *gpu;
        int listed;     /* against known (count up to 8), else free (up to 64) */
        const char *want;
    } cases[] = {
        { "H100", 1, "4 1" }, { "RTX-4090:8", 1, "8 8" }, { "H10", 1, "-" }, { "H1000", 1, "-" },
        { "h100", 1, "-" }, { "H100:0", 1, "-" }, { "H100:9", 1, "-" }, { "H100:", 1, "-" },
        { "H100:2x", 1, "-" }, { "H100:-1", 1, "-" }, { "", 1, "-" }, { ":2", 1, "-" },
        { "A100", 1, "-" }, { NULL, 1, "-" }, { "a100-80gb:64", 0, "9 64" }, { "T4", 0, "2 1" },
        { "T4:65", 0, "-" }, { "T 4", 0, "-" }, { "T4_", 0, "-" }, { "", 0, "-" },
        { ":1", 0, "-" }, { "T4:99999999999999999999", 0, "-" },
        { "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 0, "63 1" },
        { "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 0, "-" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 99;
        long count = 99;
        char got[32] = "-";
        int rc = cl_gpu_parse(cases[i].gpu, cases[i].listed ? known : NULL,
                              cases[i].listed ? 8 : 64, &n, &count);
        if (rc == 0)
            snprintf(got, sizeof got, "%zu %ld", n, count);
        else
            cr_assert(rc == -1 && n == 99 && count == 99, "%s: nothing stored", cases[i].gpu);
        cr_assert_str_eq(got, cases[i].want, "%s", cases[i].gpu ? cases[i].gpu : "(null)");
    }
}

/* backend_options of a provider that takes none: absent or empty is 0; a
 * key or a text that is not an object is refused naming it. */
Test(provider, no_backend_options)
{
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq) };
    cr_assert_eq(cl_no_backend_options(&rq, "acme", NULL), 0);
    rq.backend_options = "";
    cr_assert_eq(cl_no_backend_options(&rq, "acme", NULL), 0);
    rq.backend_options = "{}";
    cr_assert_eq(cl_no_backend_options(&rq, "acme", NULL), 0);
    rq.backend_options = "{\"region\":\"eu\",\"x\":1}";
    cr_assert_eq(cl_no_backend_options(&rq, "acme", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: unknown key \"region\" (the acme "
                     "backend takes no backend options)");
    rq.backend_options = "[1,2]";
    cr_assert_eq(cl_no_backend_options(&rq, "acme", NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: [1,2] is not a JSON object");
}

/* The ownership labels, in their order; the token and the expiry only when
 * there are. */
Test(provider, meta_labels)
{
    sbx_call_ctx ctx = { .struct_size = sizeof(ctx), .cancel_fd = -1,
                         .create_token = "sbx-00112233445566778899aabbccddeeff" };
    json_object *m = cl_meta_labels(&ctx, "acme", 1767225600.4);
    cr_assert_str_eq(json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN),
                     "{\"sbx_backend\":\"acme\",\"sbx_create_token\":"
                     "\"sbx-00112233445566778899aabbccddeeff\",\"sbx_expires_at\":\"1767225600\"}");
    json_object_put(m);
    m = cl_meta_labels(NULL, "acme", 0);
    cr_assert_str_eq(json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN),
                     "{\"sbx_backend\":\"acme\"}");
    json_object_put(m);
}

typedef struct owned_seen {
    int n;
    char id[64], token[64];
    double created_at, expires_at;
} owned_seen;

static int owned_cb(const sbx_plugin_owned_info *info, void *ud)
{
    owned_seen *s = ud;
    s->n++;
    snprintf(s->id, sizeof s->id, "%s", info->id);
    snprintf(s->token, sizeof s->token, "%s", info->create_token);
    s->created_at = info->created_at;
    s->expires_at = info->expires_at;
    return 7;
}

/* A listed item to what list_owned hands on; items without an id or a
 * token are passed over; the creation time read as RFC 3339. */
Test(provider, owned_listed)
{
    owned_seen s = { 0 };
    cl_owned o = { owned_cb, &s, "id", "labels", "createdAt" };
    json_object *it = json_tokener_parse("{\"id\":\"sb-9\",\"createdAt\":"
                                         "\"2026-01-01T00:00:00.25Z\",\"labels\":{"
                                         "\"sbx_create_token\":\"sbx-aa\",\"sbx_expires_at\":"
                                         "\"1767225600\"}}");
    cr_assert_eq(cl_owned_listed(&o, it), 7);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.id, "sb-9");
    cr_assert_str_eq(s.token, "sbx-aa");
    cr_assert_eq(s.created_at, 1767225600.25);
    cr_assert_eq(s.expires_at, 1767225600);
    cl_owned other_id = { owned_cb, &s, "sandboxID", "labels", NULL };
    cl_owned other_labels = { owned_cb, &s, "id", "metadata", NULL };
    cr_assert_eq(cl_owned_listed(&other_id, it), 0);
    cr_assert_eq(cl_owned_listed(&other_labels, it), 0);
    cr_assert_eq(s.n, 1);
    json_object_put(it);
    it = json_tokener_parse("{\"id\":\"sb-10\",\"labels\":{\"sbx_create_token\":\"sbx-bb\"}}");
    cr_assert_eq(cl_owned_listed(&o, it), 7);
    cr_assert_str_eq(s.id, "sb-10");
    cr_assert_eq(s.created_at, 0);
    cr_assert_eq(s.expires_at, 0);
    json_object_put(it);
    cr_assert_eq(cl_rfc3339("2026-08-21T10:00:00Z"), 1787306400);
    cr_assert_eq(cl_rfc3339("yesterday"), 0);
    cr_assert_eq(cl_rfc3339(NULL), 0);
}

/* One sandbox's labels to what list_owned hands on: the backend checked
 * when asked; no id, no token or another backend is passed over. */
Test(provider, owned_report)
{
    owned_seen s = { 0 };
    json_object *lb = json_tokener_parse("{\"sbx_backend\":\"acme\",\"sbx_create_token\":"
                                         "\"sbx-cc\",\"sbx_expires_at\":\"1767225600\"}");
    cr_assert_eq(cl_owned_report(owned_cb, &s, "sb-11", lb, 12.5, "acme"), 7);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.id, "sb-11");
    cr_assert_str_eq(s.token, "sbx-cc");
    cr_assert_eq(s.created_at, 12.5);
    cr_assert_eq(s.expires_at, 1767225600);
    cr_assert_eq(cl_owned_report(owned_cb, &s, "sb-11", lb, 0, "other"), 0);
    cr_assert_eq(cl_owned_report(owned_cb, &s, NULL, lb, 0, NULL), 0);
    cr_assert_eq(cl_owned_report(owned_cb, &s, "sb-11", NULL, 0, NULL), 0);
    cr_assert_eq(s.n, 1);
    json_object_put(lb);
    lb = json_tokener_parse("{\"sbx_create_token\":\"sbx-dd\"}");
    cr_assert_eq(cl_owned_report(owned_cb, &s, "sb-12", lb, 0, "acme"), 0);
    cr_assert_eq(cl_owned_report(owned_cb, &s, "sb-12", lb, 0, NULL), 7);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.token, "sbx-dd");
    cr_assert_eq(s.expires_at, 0);
    json_object_put(lb);
}

/* A server on 127.0.0.1 that answers each request with the next of its
 * answers ("HEADERS\r\n" lines, then the body, status 200 unless given)
 * and keeps the request lines. */
typedef struct page_answer {
    int status;
    const char *headers;
    const char *body;
} page_answer;

typedef struct page_server {
    int fd, port, n, served;
    const page_answer *answers;
    char lines[8][256];
    char bodies[8][256];    /* each request's body (by its Content-Length) */
    pthread_t thread;
} page_server;

static void *page_serve(void *ud)
{
    page_server *sv = ud;
    while (sv->served < sv->n) {
        int c = accept(sv->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[8192];
        size_t len = 0;
        while (len < sizeof buf - 1) {
            ssize_t r = read(c, buf + len, sizeof buf - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
            buf[len] = '\0';
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        buf[len] = '\0';
        char *cl = strstr(buf, "\r\nContent-Length:"), *end = strstr(buf, "\r\n\r\n");
        size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
        while (end && len < sizeof buf - 1 && len - (size_t)(end + 4 - buf) < want) {
            ssize_t r = read(c, buf + len, sizeof buf - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
            buf[len] = '\0';
        }
        const page_answer *a = &sv->answers[sv->served];
        snprintf(sv->lines[sv->served < 8 ? sv->served : 7], 256, "%.*s",
                 (int)strcspn(buf, "\r"), buf);
        snprintf(sv->bodies[sv->served < 8 ? sv->served : 7], 256, "%s", end ? end + 4 : "");
        sv->served++;
        char out[4096];
        int n = snprintf(out, sizeof out, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                         "%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         a->status ? a->status : 200, a->headers ? a->headers : "",
                         strlen(a->body), a->body);
        ssize_t w = write(c, out, (size_t)n);
        (void)w;
        close(c);
    }
    return NULL;
}

static void page_start(page_server *sv, const page_answer *answers, int n)
{
    memset(sv, 0, sizeof(*sv));
    sv->answers = answers;
    sv->n = n;
    sv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    cr_assert_eq(bind(sv->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(sv->fd, 8), 0);
    cr_assert_eq(getsockname(sv->fd, (struct sockaddr *)&a, &al), 0);
    sv->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&sv->thread, NULL, page_serve, sv), 0);
}

static void page_stop(page_server *sv)
{
    pthread_join(sv->thread, NULL);
    close(sv->fd);
}

typedef struct pages_seen {
    int n, stop_at;
    char ids[256];
} pages_seen;

static int listed_cb(void *ud, json_object *it)
{
    pages_seen *l = ud;
    size_t k = strlen(l->ids);
    snprintf(l->ids + k, sizeof l->ids - k, "%s%s", k ? " " : "", cl_json_str(it, "id"));
    return ++l->n == l->stop_at;
}

/* Pages by an answer header (the answer an array) and by a member of the
 * answer (the items in a member): every page read, the token sent
 * percent-encoded; a stop ends the listing; an answer that is not an array
 * and one that is not 200 are errors, and so is no first URL (no memory
 * built it). */
Test(provider, list_pages)
{
    cl_backend = "acme";
    cl_http *h = cl_http_new();
    char url[128];
    page_server sv;
    static const page_answer by_header[] = {
        { 0, "X-Next-Token: a b\r\n", "[{\"id\":\"1\"},{\"id\":\"2\"}]" },
        { 0, "X-Next-Token: \r\n", "[{\"id\":\"3\"}]" },
    };
    page_start(&sv, by_header, 2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v2/sandboxes?limit=2", sv.port);
    cl_pages pg = { url, "nextToken", "X-Next-Token", NULL, NULL, "list sandboxes", 0 };
    pages_seen l = { 0 };
    cr_assert_eq(cl_list_pages(h, NULL, &pg, listed_cb, &l, "list_owned", NULL), 0);
    page_stop(&sv);
    cr_assert_str_eq(l.ids, "1 2 3");
    cr_assert_str_eq(sv.lines[0], "GET /v2/sandboxes?limit=2 HTTP/1.1");
    cr_assert_str_eq(sv.lines[1], "GET /v2/sandboxes?limit=2&nextToken=a%20b HTTP/1.1");

    static const page_answer by_member[] = {
        { 0, NULL, "{\"items\":[{\"id\":\"4\"}],\"nextCursor\":\"c2\"}" },
        { 0, NULL, "{\"items\":[{\"id\":\"5\"},{\"id\":\"6\"}],\"nextCursor\":\"c3\"}" },
    };
    page_start(&sv, by_member, 2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandbox?limit=1", sv.port);
    cl_pages pm = { url, "cursor", NULL, "nextCursor", "items", "list sandboxes", 0 };
    pages_seen m = { .stop_at = 2 };
    cr_assert_eq(cl_list_pages(h, NULL, &pm, listed_cb, &m, "list_owned", NULL), 0);
    page_stop(&sv);
    cr_assert_str_eq(m.ids, "4 5");
    cr_assert_eq(sv.served, 2);
    cr_assert_str_eq(sv.lines[1], "GET /sandbox?limit=1&cursor=c2 HTTP/1.1");

    static const page_answer not_array[] = { { 0, NULL, "{\"items\":[]}" } };
    page_start(&sv, not_array, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v2/sandboxes", sv.port);
    pages_seen e = { 0 };
    cr_assert_eq(cl_list_pages(h, NULL, &pg, listed_cb, &e, "list_owned", NULL), -1);
    page_stop(&sv);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "acme list answered with no array");

    static const page_answer refused[] = { { 401, NULL, "{\"message\":\"bad key\"}" } };
    page_start(&sv, refused, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandbox", sv.port);
    cr_assert_eq(cl_list_pages(h, NULL, &pm, listed_cb, &e, "list_owned", NULL), -1);
    page_stop(&sv);
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg, "list sandboxes: bad key (HTTP 401)");
    cr_assert_eq(e.n, 0);
    cl_pages none = { NULL, "cursor", NULL, "nextCursor", "items", "list sandboxes", 0 };
    cr_assert_eq(cl_list_pages(h, NULL, &none, listed_cb, &e, "list_owned", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_eq(e.n, 0);
    cl_http_free(h);
}

/* Pages whose token is nested (a dotted token_key), whose answer may be
 * the array itself (CL_PAGES_ARRAY_TOO: the last page), and whose empty
 * page ends the listing (CL_PAGES_EMPTY_ENDS) though it names a token. */
Test(provider, list_pages_nested_token_array_and_empty_end)
{
    cl_backend = "acme";
    cl_http *h = cl_http_new();
    char url[128];
    page_server sv;
    static const page_answer nested[] = {
        { 0, NULL, "{\"data\":[{\"id\":\"1\"}],\"meta\":{\"nextCursor\":\"c 2\"}}" },
        { 0, NULL, "[{\"id\":\"2\"},{\"id\":\"3\"}]" },
    };
    page_start(&sv, nested, 2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandboxes?limit=100", sv.port);
    cl_pages pg = { url, "cursor", NULL, "meta.nextCursor", "data", "list sandboxes",
                    CL_PAGES_ARRAY_TOO | CL_PAGES_EMPTY_ENDS };
    pages_seen l = { 0 };
    cr_assert_eq(cl_list_pages(h, NULL, &pg, listed_cb, &l, "list_owned", NULL), 0);
    page_stop(&sv);
    cr_assert_str_eq(l.ids, "1 2 3");
    cr_assert_eq(sv.served, 2);
    cr_assert_str_eq(sv.lines[1], "GET /sandboxes?limit=100&cursor=c%202 HTTP/1.1");

    static const page_answer empty[] = {
        { 0, NULL, "{\"data\":[],\"meta\":{\"nextCursor\":\"c3\"}}" },
    };
    page_start(&sv, empty, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandboxes?limit=100", sv.port);
    pages_seen e = { 0 };
    cr_assert_eq(cl_list_pages(h, NULL, &pg, listed_cb, &e, "list_owned", NULL), 0);
    page_stop(&sv);
    cr_assert_eq(e.n, 0);
    cr_assert_eq(sv.served, 1);
    cl_http_free(h);
}

/* One page of a listing the plugin pages itself: the answer with its items
 * array; a 404 is "no list at" the API, an answer without the array a
 * connection error, another status the answer's error. */
Test(provider, list_page_items_and_its_errors)
{
    cl_backend = "acme";
    cl_http *h = cl_http_new();
    char api[64];
    page_server sv;
    static const page_answer answers[] = {
        { 0, NULL, "{\"boxes\":[{\"id\":\"1\"},{\"id\":\"2\"}],\"has_more\":true}" },
        { 404, NULL, "{\"message\":\"no route\"}" },
        { 0, NULL, "{\"boxes\":{}}" },
        { 401, NULL, "{\"message\":\"bad key\"}" },
    };
    page_start(&sv, answers, 4);
    snprintf(api, sizeof api, "http://127.0.0.1:%d", sv.port);
    json_object *items = NULL;
    json_object *j = cl_list_page(h, NULL, cl_printf("%s/v1/boxes?limit=2", api), api, "box",
                                  "boxes", &items, "list_owned", "list boxes", NULL);
    cr_assert_not_null(j);
    cr_assert_eq(json_object_array_length(items), 2);
    cr_assert_str_eq(cl_json_str(json_object_array_get_idx(items, 1), "id"), "2");
    cr_assert_eq(cl_json_bool(j, "has_more"), 1);
    json_object_put(j);
    cr_assert_null(cl_list_page(h, NULL, cl_printf("%s/v1/boxes", api), api, "box", "boxes",
                                &items, "list_owned", "list boxes", NULL));
    cr_assert_null(items);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    char want[128];
    snprintf(want, sizeof want, "acme: no box list at %s", api);
    cr_assert_str_eq(cl_last()->msg, want);
    cr_assert_null(cl_list_page(h, NULL, cl_printf("%s/v1/boxes", api), api, "box", "boxes",
                                &items, "list_owned", "list boxes", NULL));
    cr_assert_null(items);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "acme list answered with no boxes array");
    cr_assert_null(cl_list_page(h, NULL, cl_printf("%s/v1/boxes", api), api, "box", "boxes",
                                &items, "list_owned", "list boxes", NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg, "list boxes: bad key (HTTP 401)");
    page_stop(&sv);
    cr_assert_eq(sv.served, 4);
    cr_assert_str_eq(sv.lines[0], "GET /v1/boxes?limit=2 HTTP/1.1");
    cr_assert_null(cl_list_page(h, NULL, NULL, api, "box", "boxes", &items, "list_owned",
                                "list boxes", NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cl_http_free(h);
}

/* One item's GET and DELETE by its collection and id: the id
 * percent-encoded in the path; a 404 is no error (NULL with status 404 for
 * the GET, 0 for the DELETE); another status is the answer's error. */
Test(provider, item_get_and_delete)
{
    cl_http *h = cl_http_new();
    char api[64];
    page_server sv;
    static const page_answer answers[] = {
        { 0, NULL, "{\"id\":\"a b\",\"state\":\"started\"}" },
        { 404, NULL, "{\"message\":\"no such sandbox\"}" },
        { 404, NULL, "{\"message\":\"no such sandbox\"}" },
        { 409, NULL, "{\"message\":\"it is busy\"}" },
    };
    page_start(&sv, answers, 4);
    snprintf(api, sizeof api, "http://127.0.0.1:%d/api", sv.port);
    long st = 0;
    json_object *j = cl_item_get(h, NULL, api, "sandbox", "a b", &st, "resume", "get the sandbox",
                                 NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(cl_json_str(j, "state"), "started");
    json_object_put(j);
    cr_assert_null(cl_item_get(h, NULL, api, "sandbox", "gone", &st, "resume", "get the sandbox",
                               NULL));
    cr_assert_eq(st, 404);
    cr_assert_eq(cl_item_delete(h, NULL, api, "sandbox", "gone", "destroy", "delete the sandbox",
                                NULL), 0);
    cr_assert_eq(cl_item_delete(h, NULL, api, "sandbox", "a b", "destroy", "delete the sandbox",
                                NULL), -1);
    page_stop(&sv);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "delete the sandbox: it is busy (HTTP 409)");
    cr_assert_str_eq(sv.lines[0], "GET /api/sandbox/a%20b HTTP/1.1");
    cr_assert_str_eq(sv.lines[1], "GET /api/sandbox/gone HTTP/1.1");
    cr_assert_str_eq(sv.lines[2], "DELETE /api/sandbox/gone HTTP/1.1");
    cr_assert_str_eq(sv.lines[3], "DELETE /api/sandbox/a%20b HTTP/1.1");
    cl_http_free(h);
}

/* The per-call environment's keys as shell names: each refused key named,
 * a string without '=' refused too. */
Test(provider, env_names_check)
{
    static const char *const good[] = { "A=1", "_x9=two words", "PATH=/bin", NULL };
    cr_assert_eq(cl_env_names_check(good, "exec", NULL), 0);
    cr_assert_eq(cl_env_names_check(NULL, "exec", NULL), 0);
    static const char *const digit[] = { "A=1", "9LIVES=x", NULL };
    cl_host = &rec_host;
    sbx_error *err = NULL;
    cr_assert_eq(cl_env_names_check(digit, "exec", &err), -1);
    cl_host = NULL;
    cr_assert_not_null(err);
    /* The variable's name, under a key the host does not redact. */
    cr_assert_str_eq(err->pairs, "env_name=9LIVES;");
    free(err);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "env key \"9LIVES\" is not a shell name (KEY=VALUE, KEY of "
                     "letters, digits and _, not starting with a digit)");
    static const char *const dash[] = { "MY-KEY=x", NULL };
    cr_assert_eq(cl_env_names_check(dash, "exec", NULL), -1);
    cr_assert(strstr(cl_last()->msg, "\"MY-KEY\"") != NULL, "%s", cl_last()->msg);
    static const char *const no_eq[] = { "JUSTKEY", NULL };
    cr_assert_eq(cl_env_names_check(no_eq, "exec", NULL), -1);
    cr_assert(strstr(cl_last()->msg, "\"JUSTKEY\"") != NULL, "%s", cl_last()->msg);
    static const char *const empty[] = { "=v", NULL };
    cr_assert_eq(cl_env_names_check(empty, "exec", NULL), -1);
    cr_assert(strstr(cl_last()->msg, "env key \"\"") != NULL, "%s", cl_last()->msg);
}

/* A create's refusal codes: a 4xx is what was asked (configuration) but
 * for the statuses that name another cause. */
Test(provider, create_refused_code)
{
    static const struct { long status; sbx_error_code code; } want[] = {
        { 400, SBX_ERROR_CONFIGURATION }, { 404, SBX_ERROR_CONFIGURATION },
        { 409, SBX_ERROR_CONFIGURATION }, { 422, SBX_ERROR_CONFIGURATION },
        { 401, CL_CODE_BY_STATUS },       { 403, CL_CODE_BY_STATUS },
        { 408, CL_CODE_BY_STATUS },       { 429, CL_CODE_BY_STATUS },
        { 500, CL_CODE_BY_STATUS },       { 503, CL_CODE_BY_STATUS },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_eq(cl_create_refused_code(want[i].status), want[i].code, "HTTP %ld",
                     want[i].status);
}

/* The one-POST create: the answer and its id (nested too, by a dotted
 * path); a refusal is configuration with the provider's message; an answer
 * without the id is creation_failed naming it; a URL that could not be
 * made is resource_exhausted. */
Test(provider, create_post)
{
    cl_backend = "acme";
    cl_http *h = cl_http_new();
    char url[64];
    page_server sv;
    static const page_answer answers[] = {
        { 201, NULL, "{\"sandboxID\":\"sb-1\",\"domain\":\"example\"}" },
        { 422, NULL, "{\"message\":\"no such template\"}" },
        { 200, NULL, "{\"domain\":\"example\"}" },
    };
    page_start(&sv, answers, 3);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandboxes", sv.port);
    json_object *body = json_tokener_parse("{\"templateID\":\"base\"}");
    const char *id = NULL;
    json_object *j = cl_create_post(h, NULL, NULL, url, body, "sandboxID", "a sandboxID",
                                    "create the sandbox", &id, NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(id, "sb-1");
    cr_assert_str_eq(cl_json_str(j, "domain"), "example");
    json_object_put(j);
    cr_assert_null(cl_create_post(h, NULL, NULL, url, body, "sandboxID", "a sandboxID",
                                  "create the sandbox", &id, NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "create the sandbox: no such template (HTTP 422)");
    cr_assert_null(cl_create_post(h, NULL, NULL, url, body, "sandboxID", "a sandboxID",
                                  "create the sandbox", &id, NULL));
    cr_assert_null(id);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CREATION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "acme create answered without a sandboxID");
    page_stop(&sv);
    cr_assert_str_eq(sv.lines[0], "POST /sandboxes HTTP/1.1");
    cr_assert_null(cl_create_post(h, NULL, NULL, NULL, body, "sandboxID", "a sandboxID",
                                  "create the sandbox", &id, NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);

    /* An id nested in the answer, named by a dotted path. */
    static const page_answer nested[] = {
        { 200, NULL, "{\"sandbox\":{\"id\":\"sb-2\",\"status\":\"pending\"}}" },
        { 200, NULL, "{\"sandbox\":{\"status\":\"pending\"},\"id\":\"sb-3\"}" },
    };
    page_start(&sv, nested, 2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sandboxes", sv.port);
    j = cl_create_post(h, NULL, NULL, url, body, "sandbox.id", "a sandbox id",
                       "create the sandbox", &id, NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(id, "sb-2");
    json_object_put(j);
    cr_assert_null(cl_create_post(h, NULL, NULL, url, body, "sandbox.id", "a sandbox id",
                                  "create the sandbox", &id, NULL));
    cr_assert_null(id);
    cr_assert_str_eq(cl_last()->msg, "acme create answered without a sandbox id");
    page_stop(&sv);
    json_object_put(body);
    cl_http_free(h);
}

/* A JSON POST: the body given as plain JSON, {} when none is given; the
 * answer whatever its status; a URL that could not be made is
 * resource_exhausted, nothing sent. */
Test(provider, post_json)
{
    cl_http *h = cl_http_new();
    page_server sv;
    static const page_answer answers[] = {
        { 200, NULL, "{\"ok\":true}" },
        { 409, NULL, "{\"message\":\"busy\"}" },
    };
    page_start(&sv, answers, 2);
    json_object *body = json_tokener_parse("{\"path\":\"/a b\"}");
    cl_resp r = { 0 };
    cr_assert_eq(cl_post_json(h, NULL, cl_printf("http://127.0.0.1:%d/v1/x/sb-1/read", sv.port),
                              body, CL_SAFE, &r, "read_file", "read the file", NULL), 0);
    cr_assert_eq(r.status, 200);
    cl_resp_clear(&r);
    cr_assert_eq(cl_post_json(h, NULL, cl_printf("http://127.0.0.1:%d/v1/x/sb-1/stop", sv.port),
                              NULL, CL_UNSAFE, &r, "stop", "stop it", NULL), 0);
    cr_assert_eq(r.status, 409);
    cl_resp_clear(&r);
    page_stop(&sv);
    cr_assert_str_eq(sv.lines[0], "POST /v1/x/sb-1/read HTTP/1.1");
    cr_assert_str_eq(sv.bodies[0], "{\"path\":\"\\/a b\"}");
    cr_assert_str_eq(sv.lines[1], "POST /v1/x/sb-1/stop HTTP/1.1");
    cr_assert_str_eq(sv.bodies[1], "{}");
    cr_assert_eq(cl_post_json(h, NULL, NULL, body, CL_SAFE, &r, "stop", "stop it", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(cl_last()->msg, "out of memory");
    cr_assert_eq(sv.served, 2);
    json_object_put(body);
    cl_http_free(h);
}

/* The ids of a listing's items by their id member; an item without one
 * adds nothing. */
Test(provider, ids_listed)
{
    cl_listed_ids l = { { 0 }, "sandboxID" };
    json_object *a = json_tokener_parse("{\"sandboxID\":\"sb-1\"}");
    json_object *b = json_tokener_parse("{\"id\":\"sb-2\"}");
    json_object *c = json_tokener_parse("{\"sandboxID\":\"sb-3\"}");
    cr_assert_eq(cl_ids_listed(&l, a), 0);
    cr_assert_eq(cl_ids_listed(&l, b), 0);
    cr_assert_eq(cl_ids_listed(&l, c), 0);
    char **ids = NULL;
    cr_assert_eq(cl_ids_finish(&l.ids, 0, &ids, "create", NULL), 0);
    cr_assert_str_eq(ids[0], "sb-1");
    cr_assert_str_eq(ids[1], "sb-3");
    cr_assert_null(ids[2]);
    cl_strv_free(ids);
    json_object_put(a);
    json_object_put(b);
    json_object_put(c);
}

/* A call on a sandbox: 2xx and the status given as done already are 0,
 * another status is its error; a 404 sets the gone flag, after which the
 * next call fails at once, sending nothing. */
Test(provider, sandbox_call)
{
    cl_backend = "acme";
    cl_http *h = cl_http_new();
    char api[64];
    page_server sv;
    static const page_answer answers[] = {
        { 200, NULL, "{}" },
        { 409, NULL, "{\"message\":\"already paused\"}" },
        { 409, NULL, "{\"message\":\"already paused\"}" },
        { 404, NULL, "{\"message\":\"no such sandbox\"}" },
    };
    page_start(&sv, answers, 4);
    snprintf(api, sizeof api, "http://127.0.0.1:%d", sv.port);
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-4"), 0);
    cr_assert_eq(cl_sandbox_call(&s, h, NULL, "POST", api, "sandboxes", "/pause", NULL, CL_SAFE,
                                 409, "stop", "pause the sandbox", NULL), 0);
    cr_assert_eq(cl_sandbox_call(&s, h, NULL, "POST", api, "sandboxes", "/pause", NULL, CL_SAFE,
                                 409, "stop", "pause the sandbox", NULL), 0);
    cr_assert_eq(cl_sandbox_call(&s, h, NULL, "POST", api, "sandboxes", "/stop", NULL, CL_SAFE,
                                 0, "stop", "stop the sandbox", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "stop the sandbox: already paused (HTTP 409)");
    cr_assert_eq(cl_sandbox_call(&s, h, NULL, "POST", api, "sandboxes", "/stop", NULL, CL_SAFE,
                                 0, "stop", "stop the sandbox", NULL), -1);
    page_stop(&sv);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-4 is gone (the provider no longer has it)");
    cr_assert_eq(cl_sandbox_call(&s, h, NULL, "POST", api, "sandboxes", "/stop", NULL, CL_SAFE,
                                 0, "stop", "stop the sandbox", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_eq(sv.served, 4);
    cr_assert_str_eq(sv.lines[0], "POST /sandboxes/sb-4/pause HTTP/1.1");
    cr_assert_str_eq(sv.lines[3], "POST /sandboxes/sb-4/stop HTTP/1.1");
    cl_sandbox_clear(&s);
    cl_http_free(h);
}

/* A status read with the provider's word for none: the string when the
 * member is one, else the default (no object, no member, not a string). */
Test(provider, json_str_or)
{
    json_object *j = json_tokener_parse("{\"status\":\"running\",\"code\":3}");
    cr_assert_str_eq(cl_json_str_or(j, "status", "unknown"), "running");
    cr_assert_str_eq(cl_json_str_or(j, "state", "unknown"), "unknown");
    cr_assert_str_eq(cl_json_str_or(j, "code", "UNKNOWN"), "UNKNOWN");
    cr_assert_str_eq(cl_json_str_or(NULL, "status", "none"), "none");
    json_object_put(j);
}

Test(provider, str_in)
{
    static const char *const dead[] = { "stopped", "failed", NULL };
    cr_assert_eq(cl_str_in("failed", dead), 1);
    cr_assert_eq(cl_str_in("stopped", dead), 1);
    cr_assert_eq(cl_str_in("stopping", dead), 0);
    cr_assert_eq(cl_str_in(NULL, dead), 0);
    cr_assert_eq(cl_str_in("failed", NULL), 0);
}

/* The provider of resume_get's test: sandbox "sb-run" runs, "sb-end"
 * ended, "sb-404" is unknown to it, "sb-down" gets no answer. */
static int resume_gets;

static json_object *resume_get(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                               const char *id, long *status, const char *op, sbx_error **error)
{
    (void)client;
    (void)ctx;
    cr_assert_str_eq(op, "resume");
    resume_gets++;
    *status = 200;
    if (strcmp(id, "sb-run") == 0)
        return json_tokener_parse("{\"status\":\"running\"}");
    if (strcmp(id, "sb-end") == 0)
        return json_tokener_parse("{\"status\":\"shutdown\"}");
    if (strcmp(id, "sb-404") == 0) {
        *status = 404;
        return NULL;
    }
    *status = 0;
    cl_fail(error, SBX_ERROR_CONNECTION, op, "get the sandbox: no answer");
    return NULL;
}

static int resume_gones;
static char resume_gone_state[32];  /* the state of the item gone() got; "" for none */

static sbx_error *resume_gone(sbx_error **error, const char *op, const char *id,
                              json_object *item)
{
    resume_gones++;
    snprintf(resume_gone_state, sizeof resume_gone_state, "%s",
             item ? cl_json_str(item, "status") : "");
    return cl_fail(error, SBX_ERROR_NOT_FOUND, op, "devbox %s ended", id);
}

/* resume's start: the state checked, the sandbox got; 404 and an ended
 * state are the gone error (the plugin's, or the base's), no answer is
 * the get's error, a bad state gets nothing. */
Test(provider, resume_get_checks_state_answer_and_end)
{
    static const char *const dead[] = { "shutdown", "failure", NULL };
    cl_resume_spec spec = { "acme", 1, "devbox_id", resume_get, "status", dead, NULL };
    json_object *state = NULL;
    const char *id = NULL;
    json_object *j = cl_resume_get(NULL, NULL, "{\"version\":1,\"devbox_id\":\"sb-run\","
                                   "\"workdir\":\"/w\"}", &spec, &state, &id, NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(cl_json_str(j, "status"), "running");
    cr_assert_str_eq(id, "sb-run");
    cr_assert_str_eq(cl_json_str(state, "workdir"), "/w");
    json_object_put(j);
    json_object_put(state);

    static const char *const gone[] = { "{\"version\":1,\"devbox_id\":\"sb-end\"}",
                                        "{\"version\":1,\"devbox_id\":\"sb-404\"}" };
    for (int i = 0; i < 2; i++) {
        state = (json_object *)&spec;
        cr_assert_null(cl_resume_get(NULL, NULL, gone[i], &spec, &state, &id, NULL));
        cr_assert_null(state);
        cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
        cr_assert_str_eq(cl_last()->msg, i == 0 ? "acme sandbox sb-end is gone (the provider "
                                                  "no longer has it)"
                                                : "acme sandbox sb-404 is gone (the provider "
                                                  "no longer has it)");
    }
    spec.gone = resume_gone;
    for (int i = 0; i < 2; i++) {
        cr_assert_null(cl_resume_get(NULL, NULL, gone[i], &spec, &state, &id, NULL));
        cr_assert_eq(resume_gones, i + 1);
        cr_assert_str_eq(cl_last()->msg, i == 0 ? "devbox sb-end ended" : "devbox sb-404 ended");
        cr_assert_str_eq(resume_gone_state, i == 0 ? "shutdown" : "");
    }
    cr_assert_null(cl_resume_get(NULL, NULL, "{\"version\":1,\"devbox_id\":\"sb-down\"}", &spec,
                                 &state, &id, NULL));
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "get the sandbox: no answer");
    cr_assert_eq(resume_gones, 2);
    int gets = resume_gets;
    cr_assert_null(cl_resume_get(NULL, NULL, "{\"version\":2,\"devbox_id\":\"sb-run\"}", &spec,
                                 &state, &id, NULL));
    cr_assert_null(state);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme session state: needs \"version\": 1 and a "
                                     "\"devbox_id\"");
    cr_assert_eq(resume_gets, gets);
    /* No state looked at: an ended sandbox is handed over. */
    spec.state_key = NULL;
    j = cl_resume_get(NULL, NULL, gone[0], &spec, &state, &id, NULL);
    cr_assert_str_eq(cl_json_str(j, "status"), "shutdown");
    json_object_put(j);
    json_object_put(state);
}

/* The provider of the ended/gone look: as resume_get(), the error never
 * asked for (dropped), the op remembered. */
static char ended_op[32];

static json_object *ended_get(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                              const char *id, long *status, const char *op, sbx_error **error)
{
    cr_assert_null(error);
    snprintf(ended_op, sizeof ended_op, "%s", op);
    return resume_get(client, ctx, id, status, "resume", error);
}

/* Whether a sandbox ended (404 or a dead state; no answer is not), and the
 * gone flag and error that follow from it, as resume gives them. */
Test(provider, sandbox_ended_and_confirm_gone)
{
    static const char *const dead[] = { "shutdown", "failure", NULL };
    cl_resume_spec spec = { "acme", 1, "devbox_id", ended_get, "status", dead, NULL };
    json_object *view = (json_object *)&spec;
    cr_assert_eq(cl_sandbox_ended(NULL, NULL, &spec, "sb-run", "stop", &view), 0);
    cr_assert_str_eq(ended_op, "stop");
    cr_assert_str_eq(cl_json_str(view, "status"), "running");
    json_object_put(view);
    cr_assert_eq(cl_sandbox_ended(NULL, NULL, &spec, "sb-end", "stop", &view), 1);
    cr_assert_str_eq(cl_json_str(view, "status"), "shutdown");
    json_object_put(view);
    cr_assert_eq(cl_sandbox_ended(NULL, NULL, &spec, "sb-404", "stop", &view), 1);
    cr_assert_null(view);
    cr_assert_eq(cl_sandbox_ended(NULL, NULL, &spec, "sb-down", "stop", NULL), 0);

    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-run"), 0);
    cl_fail(NULL, SBX_ERROR_TIMEOUT, "x", "before");
    cr_assert_eq(cl_sandbox_confirm_gone(&s, NULL, NULL, &spec, "read_file", NULL), 0);
    cr_assert_str_eq(ended_op, "read_file");
    cr_assert_eq(cl_gone_get(&s.gone), 0);
    cr_assert_str_eq(cl_last()->msg, "before");
    cl_sandbox_clear(&s);
    cr_assert_eq(cl_sandbox_init(&s, "sb-down"), 0);
    cr_assert_eq(cl_sandbox_confirm_gone(&s, NULL, NULL, &spec, "read_file", NULL), 0);
    cr_assert_eq(cl_gone_get(&s.gone), 0);
    cr_assert_str_eq(cl_last()->msg, "get the sandbox: no answer");   /* the get's, dropped */
    cl_sandbox_clear(&s);
    cr_assert_eq(cl_sandbox_init(&s, "sb-end"), 0);
    cr_assert_eq(cl_sandbox_confirm_gone(&s, NULL, NULL, &spec, "read_file", NULL), 1);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-end is gone (the provider no longer has "
                                     "it)");
    cl_sandbox_clear(&s);
    spec.gone = resume_gone;
    int gones = resume_gones;
    cr_assert_eq(cl_sandbox_init(&s, "sb-404"), 0);
    cr_assert_eq(cl_sandbox_confirm_gone(&s, NULL, NULL, &spec, "write_file", NULL), 1);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_eq(resume_gones, gones + 1);
    cr_assert_str_eq(resume_gone_state, "");
    cr_assert_str_eq(cl_last()->msg, "devbox sb-404 ended");
    cl_sandbox_clear(&s);
    cr_assert_eq(cl_sandbox_init(&s, "sb-end"), 0);
    cr_assert_eq(cl_sandbox_confirm_gone(&s, NULL, NULL, &spec, "write_file", NULL), 1);
    cr_assert_str_eq(resume_gone_state, "shutdown");
    cr_assert_str_eq(cl_last()->msg, "devbox sb-end ended");
    cl_sandbox_clear(&s);
}

/* A stop's answer: 2xx, 404 and the provider's own "gone" status are done
 * without a look; another status is done when the sandbox has ended (one
 * GET), else its error; no answer is -1 with no look. The answer is
 * cleared each time. */
Test(provider, stop_answer)
{
    static const char *const dead[] = { "shutdown", "failure", NULL };
    cl_resume_spec spec = { "acme", 1, "devbox_id", ended_get, "status", dead, NULL };
    cl_client head = { 0 };
    head.http = cl_http_new();
    sbx_plugin_client *c = (sbx_plugin_client *)&head;
    cl_resp r = { 0 };
    int gets = resume_gets;
    r.status = 200;
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-run", 0, &r, 0, "destroy", "stop it", NULL),
                 0);
    r.status = 404;
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-run", 0, &r, 0, "destroy", "stop it", NULL),
                 0);
    r.status = 410;
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-run", 0, &r, 410, "destroy", "stop it", NULL),
                 0);
    cr_assert_eq(resume_gets, gets);
    r.status = 409;
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-end", 0, &r, 410, "destroy", "stop it", NULL),
                 0);
    cr_assert_eq(resume_gets, gets + 1);
    cr_assert_str_eq(ended_op, "destroy");
    r.status = 410;
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-run", 0, &r, 0, "destroy", "stop it", NULL),
                 -1);
    cr_assert_eq(resume_gets, gets + 2);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "stop it: no message (HTTP 410)");
    r.status = 500;
    cr_assert_eq(cl_buf_append(&r.body, "x", 1), 0);
    cr_assert_eq(cl_stop_answer(c, NULL, &spec, "sb-run", -1, &r, 0, "destroy", "stop it", NULL),
                 -1);
    cr_assert_eq(resume_gets, gets + 2);
    cr_assert_null(r.body.data);
    cl_http_free(head.http);
}

/* exec_resize's check and wait: no terminal is invalid_argument; a wait
 * past the call's deadline is its timeout, the lock released. */
Test(provider, resize_check_and_wait)
{
    cr_assert_eq(cl_resize_check(24, NULL), 0);
    cr_assert_eq(cl_resize_check(0, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "the process has no terminal to resize");
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    sbx_call_ctx live = { sizeof(live), cl_now() + 30, -1, NULL };
    cl_bound bd = cl_bound_make(&live, 0);
    pthread_mutex_lock(&lock);
    cr_assert_eq(cl_resize_wait(&bd, &cond, &lock, "acme: no pty in time", NULL), 0);
    cr_assert_eq(pthread_mutex_trylock(&lock), EBUSY);
    sbx_call_ctx past = { sizeof(past), cl_now() - 1, -1, NULL };
    bd = cl_bound_make(&past, 0);
    cr_assert_eq(cl_resize_wait(&bd, &cond, &lock, "acme: no pty in time", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_str_eq(cl_last()->msg, "acme: no pty in time");
    cr_assert_eq(pthread_mutex_trylock(&lock), 0);
    pthread_mutex_unlock(&lock);
}

/* A request at a URL that could not be made sends nothing. */
Test(provider, request_at_without_a_url)
{
    cl_req rq = { .method = "GET", .what = "get the file" };
    cl_resp r = { 0 };
    cr_assert_eq(cl_request_at(NULL, NULL, &rq, NULL, &r, "read_file", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_null(rq.url);
    cr_assert_eq(r.status, 0);
}

static char upload_path[256], upload_shown[256];
static int upload_fail;

static int upload(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                  const char *shown, const char *op, sbx_error **error)
{
    (void)sb;
    (void)ctx;
    cr_assert_eq(fd, 7);
    cr_assert_str_eq(op, "write_file");
    snprintf(upload_path, sizeof upload_path, "%s", path);
    snprintf(upload_shown, sizeof upload_shown, "%s", shown);
    if (upload_fail)
        cl_fail(error, SBX_ERROR_CONNECTION, op, "upload the file: no answer");
    return upload_fail ? -1 : 0;
}

/* write_file where the upload takes no mode: the path against the workdir,
 * the upload, then chmod; a failed upload runs no chmod. */
Test(provider, write_file_uploads_then_sets_the_mode)
{
    sbx_plugin_sandbox sb = { 0 };
    cr_assert_eq(cl_write_file(&sb, NULL, "/w d", "a b", 7, 0100640, upload, run, NULL), 0);
    cr_assert_str_eq(upload_path, "/w d/a b");
    cr_assert_str_eq(upload_shown, "a b");
    cr_assert_str_eq(sb.cmd, "chmod 640 -- '/w d/a b'");
    cr_assert_eq(cl_write_file(&sb, NULL, NULL, "/abs", 7, 0755, upload, run, NULL), 0);
    cr_assert_str_eq(upload_path, "/abs");
    cr_assert_str_eq(sb.cmd, "chmod 755 -- '/abs'");
    sb.cmd[0] = '\0';
    upload_fail = 1;
    cr_assert_eq(cl_write_file(&sb, NULL, "/w", "f", 7, 0600, upload, run, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "upload the file: no answer");
    cr_assert_str_eq(sb.cmd, "");
    upload_fail = 0;
    sb.code = 1;
    cr_assert_eq(cl_write_file(&sb, NULL, "/w", "f", 7, 0600, upload, run, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_EXECUTION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "cannot set mode 600 on f (chmod exited 1)");
}

CL_PROBE_CAPS(probe_fixed, SBX_CAP_SNAPSHOT | SBX_CAP_RESUME)

Test(provider, probe_caps_stores_the_fixed_mask)
{
    uint64_t caps = 0;
    cr_assert_eq(probe_fixed(NULL, NULL, &caps, NULL), 0);
    cr_assert_eq(caps, (uint64_t)48);
}

CL_SETUP(setup_acme, "acme")

/* The setup slot keeps the host and the backend name. */
Test(provider, setup_slot_keeps_host_and_backend)
{
    static const sbx_host_services host = { 0 };
    cr_assert_eq(setup_acme(&host, NULL), 0);
    cr_assert_eq(cl_host, &host);
    cr_assert_str_eq(cl_backend, "acme");
    cl_host = NULL;
}

static int clients_freed;

static void client_free(sbx_plugin_client *c)
{
    clients_freed++;
    free(c);
}

/* client_new's end: the config put either way; the client handed over,
 * or freed. */
Test(provider, client_end_hands_over_or_frees)
{
    sbx_plugin_client *out = NULL;
    sbx_plugin_client *c = malloc(64);
    json_object *cfg = json_tokener_parse("{\"region\":\"x\"}");
    json_object_get(cfg);
    cr_assert_eq(cl_client_end(0, c, &out, cfg, client_free), 0);
    cr_assert_eq(out, c);
    cr_assert_eq(clients_freed, 0);
    cr_assert_eq(json_object_put(cfg), 1);       /* the last reference: the end put one */
    free(out);
    out = NULL;
    c = malloc(64);
    cr_assert_eq(cl_client_end(-1, c, &out, NULL, client_free), -1);
    cr_assert_null(out);
    cr_assert_eq(clients_freed, 1);
}

/* A plugin's client around the head, and its spec's callbacks. */
typedef struct acme_client {
    cl_client cl;
    char *own;
} acme_client;

static int acme_clears;

static void acme_clear(sbx_plugin_client *c)
{
    acme_client *a = (acme_client *)c;
    acme_clears++;
    free(a->own);
}

static int acme_find(void *ud, const sbx_call_ctx *ctx, const char *token, char ***ids,
                     sbx_error **error)
{
    (void)ud;
    (void)ctx;
    (void)token;
    (void)error;
    *ids = calloc(1, sizeof(char *));
    return *ids ? 0 : -1;
}

static int acme_del(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                    const char *op, sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)id;
    (void)op;
    (void)error;
    return 0;
}

static const char *const acme_key_envs[] = { "SBX_TEST_ACME_KEY", "SBX_TEST_ACME_JWT", NULL };

static const cl_client_spec acme_spec = {
    .provider = "acme", .size = sizeof(acme_client),
    .url_key = "api_url", .url_env = "SBX_TEST_ACME_URL", .url_default = "https://api.acme.test/",
    .key_envs = acme_key_envs, .auth_header = "Authorization", .auth_prefix = "Bearer ",
    .find = acme_find, .del = acme_del, .clear = acme_clear,
};

/* The client head: the base URL from the option, else the variable, else
 * the default (trailing slashes gone); the credential header from the
 * first variable set; the reaper; the options left to the plugin; the
 * plugin's clear called once by the free slot. */
Test(provider, client_new_makes_the_head_from_the_spec)
{
    unsetenv("SBX_TEST_ACME_URL");
    unsetenv("SBX_TEST_ACME_KEY");
    setenv("SBX_TEST_ACME_JWT", "jwt-7", 1);
    json_object *cfg = (json_object *)1;
    acme_client *a = cl_client_new(&acme_spec, "{\"api_url\":\"http://127.0.0.1:9/v1//\","
                                   "\"region\":\"eu\"}", &cfg, NULL);
    cr_assert_not_null(a);
    cr_assert_str_eq(a->cl.api, "http://127.0.0.1:9/v1");
    cr_assert_str_eq(cl_json_str(cfg, "region"), "eu");
    cr_assert_not_null(a->cl.reaper);
    cr_assert_eq(a->cl.spec, &acme_spec);
    cr_assert_null(a->own);
    char **hdrs = cl_http_auth_headers(a->cl.http);
    cr_assert_not_null(hdrs);
    cr_assert_str_eq(hdrs[0], "Authorization: Bearer jwt-7");
    cr_assert_null(hdrs[1]);
    cl_strv_free(hdrs);
    a->own = strdup("team-1");
    sbx_plugin_client *out = NULL;
    cr_assert_eq(cl_client_end(0, (sbx_plugin_client *)a, &out, cfg, cl_client_free_slot), 0);
    cr_assert_eq(out, (sbx_plugin_client *)a);
    acme_clears = 0;
    cl_client_free_slot(out);
    cr_assert_eq(acme_clears, 1);
    cl_client_free_slot(NULL);
    cr_assert_eq(acme_clears, 1);

    setenv("SBX_TEST_ACME_URL", "https://eu.acme.test/", 1);
    setenv("SBX_TEST_ACME_KEY", "k-9", 1);
    a = cl_client_new(&acme_spec, NULL, &cfg, NULL);
    cr_assert_not_null(a);
    cr_assert_null(cfg);
    cr_assert_str_eq(a->cl.api, "https://eu.acme.test");
    hdrs = cl_http_auth_headers(a->cl.http);
    cr_assert_str_eq(hdrs[0], "Authorization: Bearer k-9");
    cl_strv_free(hdrs);
    cl_client_free_slot((sbx_plugin_client *)a);
    cr_assert_eq(acme_clears, 2);

    unsetenv("SBX_TEST_ACME_URL");
    unsetenv("SBX_TEST_ACME_KEY");
    unsetenv("SBX_TEST_ACME_JWT");
    a = cl_client_new(&acme_spec, "", &cfg, NULL);
    cr_assert_str_eq(a->cl.api, "https://api.acme.test");
    hdrs = cl_http_auth_headers(a->cl.http);
    cr_assert_null(hdrs[0]);
    cl_strv_free(hdrs);
    cl_client_free_slot((sbx_plugin_client *)a);
    cr_assert_eq(acme_clears, 3);
}

/* No URL option, no reaper, no clear: the head holds the http alone. */
Test(provider, client_new_of_a_bare_spec)
{
    static const cl_client_spec bare = { .provider = "bare", .size = sizeof(cl_client) };
    json_object *cfg = NULL;
    cl_client *c = cl_client_new(&bare, "{\"api_url\":\"ftp://x\"}", &cfg, NULL);
    cr_assert_not_null(c);
    cr_assert_not_null(c->http);
    cr_assert_null(c->api);
    cr_assert_null(c->reaper);
    json_object_put(cfg);
    cl_client_free_slot((sbx_plugin_client *)c);
}

/* Each failure of the head: its error, no options handed back, nothing of
 * the plugin's cleared (it set nothing yet). */
Test(provider, client_new_failures)
{
    unsetenv("SBX_TEST_ACME_URL");
    acme_clears = 0;
    json_object *cfg = (json_object *)1;
    cr_assert_null(cl_client_new(&acme_spec, "[1]", &cfg, NULL));
    cr_assert_null(cfg);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme client options must be a JSON object");

    cfg = (json_object *)1;
    cr_assert_null(cl_client_new(&acme_spec, "{\"api_url\":\"ftp://acme.test\"}", &cfg, NULL));
    cr_assert_null(cfg);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg,
                     "api_url: the base URL \"ftp://acme.test\" is not an http:// or https:// URL");

    cr_assert_null(cl_client_new(&acme_spec, "{\"retries\":\"many\"}", &cfg, NULL));
    cr_assert_null(cfg);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert(strstr(cl_last()->msg, "retries") != NULL, "%s", cl_last()->msg);

    cl_client_spec req = acme_spec;
    req.url_default = NULL;
    req.url_missing = "acme backend: no API URL (set SBX_TEST_ACME_URL)";
    cr_assert_null(cl_client_new(&req, "{}", &cfg, NULL));
    cr_assert_null(cfg);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no API URL (set SBX_TEST_ACME_URL)");
    setenv("SBX_TEST_ACME_URL", "http://127.0.0.1:8/", 1);
    acme_client *a = cl_client_new(&req, "{}", &cfg, NULL);
    unsetenv("SBX_TEST_ACME_URL");
    cr_assert_not_null(a);
    cr_assert_str_eq(a->cl.api, "http://127.0.0.1:8");
    json_object_put(cfg);
    cl_client_free_slot((sbx_plugin_client *)a);
    cr_assert_eq(acme_clears, 1);
}

/* A provider that requires its credential: without one the client is
 * still made, and each request that would carry it fails at once with
 * authentication naming the variables, nothing sent (the port below
 * answers no one: a request sent would fail as a connection error); the
 * plugin's own key (cl_http_set_auth()) lifts the mark. */
Test(provider, a_required_credential_missing_fails_each_request_unsent)
{
    cl_host = &rec_host;
    unsetenv("SBX_TEST_ACME_KEY");
    unsetenv("SBX_TEST_ACME_JWT");
    cl_client_spec req = acme_spec;
    req.key_required = 1;
    req.key_else = ", or a key in ~/.acme";
    json_object *cfg = NULL;
    acme_client *a = cl_client_new(&req, "{\"api_url\":\"http://127.0.0.1:9\",\"retries\":0}",
                                   &cfg, NULL);
    cr_assert_not_null(a);
    json_object_put(cfg);
    cl_req rq = { .method = "POST", .url = "http://127.0.0.1:9/sandboxes", .body = "{}",
                  .body_len = 2, .idempotent = CL_SAFE };
    cl_resp r;
    sbx_error *err = NULL;
    cr_assert_eq(cl_request(a->cl.http, NULL, &rq, &r, "create", &err), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no credential (set SBX_TEST_ACME_KEY or "
                                     "SBX_TEST_ACME_JWT, or a key in ~/.acme)");
    cr_assert_str_eq(err->pairs, "");
    free(err);
    err = NULL;
    cl_resp_clear(&r);
    /* The probe says so too: the backend is listed unavailable, and why. */
    uint64_t caps = 0;
    cr_assert_eq(probe_fixed((sbx_plugin_client *)a, NULL, &caps, NULL), -1);
    cr_assert_eq(caps, 0);
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no credential (set SBX_TEST_ACME_KEY or "
                                     "SBX_TEST_ACME_JWT, or a key in ~/.acme)");
#ifdef SBX_TEST_CLOUD_WS
    /* A WebSocket terminal is not connected either (nothing listens on
     * port 9: a connection error would say it was tried). */
    cl_term term = { 0 };
    cl_ws *ws = NULL;
    cr_assert_eq(cl_term_connect(&term, a->cl.http, "http://127.0.0.1:9/pty", NULL, NULL, NULL,
                                 "open the terminal", &ws, "exec", NULL), -1);
    cr_assert_null(ws);
    cr_assert_eq(cl_last()->code, SBX_ERROR_AUTHENTICATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: no credential (set SBX_TEST_ACME_KEY or "
                                     "SBX_TEST_ACME_JWT, or a key in ~/.acme)");
#endif
    /* A request sent without the credential goes out. */
    rq.no_auth = 1;
    cr_assert_eq(cl_request(a->cl.http, NULL, &rq, &r, "create", &err), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    free(err);
    err = NULL;
    cl_resp_clear(&r);
    rq.no_auth = 0;
    cr_assert_eq(cl_http_set_auth(a->cl.http, "Authorization", "Bearer k-file"), 0);
    cr_assert_eq(cl_http_missing_credential(a->cl.http, "create", NULL), 0);
    cr_assert_eq(probe_fixed((sbx_plugin_client *)a, NULL, &caps, NULL), 0);
    cr_assert_eq(caps, (uint64_t)48);
    cr_assert_eq(cl_request(a->cl.http, NULL, &rq, &r, "create", &err), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    free(err);
    cl_resp_clear(&r);
    cl_client_free_slot((sbx_plugin_client *)a);
    /* With the variable set, or not required, no mark. */
    setenv("SBX_TEST_ACME_JWT", "jwt-8", 1);
    a = cl_client_new(&req, "{}", &cfg, NULL);
    unsetenv("SBX_TEST_ACME_JWT");
    cr_assert_eq(cl_http_missing_credential(a->cl.http, "create", NULL), 0);
    json_object_put(cfg);
    cl_client_free_slot((sbx_plugin_client *)a);
    a = cl_client_new(&acme_spec, "{}", &cfg, NULL);
    cr_assert_eq(cl_http_missing_credential(a->cl.http, "create", NULL), 0);
    cr_assert_eq(cl_http_has_auth(a->cl.http), 0);
    json_object_put(cfg);
    cl_client_free_slot((sbx_plugin_client *)a);
    cl_host = NULL;
}

/* is_alive on an item: a sandbox known gone is not alive, and nothing is
 * asked (no client here to ask with). */
Test(provider, item_is_alive_of_a_gone_sandbox_asks_nothing)
{
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-8"), 0);
    cl_gone_set(&s.gone);
    cr_assert_eq(cl_item_is_alive(&s, NULL, NULL, "http://127.0.0.1:1", "sandboxes", "status",
                                  NULL, NULL), 0);
    cl_sandbox_clear(&s);
}

/* A report field decoded: percent-encoded bytes, base64, "-", and the
 * malformed ones (a byte outside the printable range, a cut %XX, an
 * unknown form, bad base64) refused. */
Test(provider, report_field_decode_gives_the_bytes_exactly)
{
    cl_buf b = { 0 };
    cr_assert_eq(cl_report_field_decode("pa%00b%FF%25%0A", 15, &b), 0);
    cr_assert_eq(b.len, 6);
    cr_assert_eq(memcmp(b.data, "a\0b\377%\n", 6), 0);
    cl_buf_clear(&b);
    cr_assert_eq(cl_report_field_decode("p", 1, &b), 0);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(cl_report_field_decode("baGkK", 5, &b), 0);
    cr_assert_eq(b.len, 3);
    cr_assert_eq(memcmp(b.data, "hi\n", 3), 0);
    cl_buf_clear(&b);
    cr_assert_eq(cl_report_field_decode("-", 1, &b), 1);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(cl_report_field_decode("pa\tb", 4, &b), -1);
    cl_buf_clear(&b);
    cr_assert_eq(cl_report_field_decode("pab%4", 5, &b), -1);
    cl_buf_clear(&b);
    cr_assert_eq(cl_report_field_decode("pab%G1", 6, &b), -1);
    cl_buf_clear(&b);
    cr_assert_eq(cl_report_field_decode("xab", 3, &b), -1);
    cr_assert_eq(cl_report_field_decode("", 0, &b), -1);
    cr_assert_eq(cl_report_field_decode("b!!!", 4, &b), -1);
    cl_buf_clear(&b);
}

/* The encoder run by bash on files: a small file's bytes percent-encoded
 * by the shell (NUL, newline, "%", a byte past 0x7f), an empty file as
 * "p", a file of more distinct odd bytes than CL_REPORT_SHELL_ODD in
 * base64, one past the base64 bound as "-"; k and m list them. */
Test(provider, report_encoder_fields_are_exact)
{
    char dir[] = "/tmp/sbx-provider-report-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    cl_buf b = { 0 };
    cr_assert_eq(cl_buf_report_encoder(&b, 40), 0);
    char *script = cl_printf(
        "cd %s; printf 'a\\0b\\377%%%%\\n' >s; : >z; "
        "printf '\\001\\002\\003\\004\\005\\006\\007\\010\\011\\013\\014\\015\\016\\017"
        "\\020\\021\\022' >o; head -c 9000 /dev/zero | tr '\\0' a >l; "
        "LC_ALL=C f= k= m=\n%s"
        "for x in s z o l; do e $x; printf '%%s|' \"$f\"; done; printf '%%s|%%s' \"$k\" \"$m\"",
        dir, b.data);
    cl_buf_clear(&b);
    char *q = cl_shell_quote(script);
    char *cmd = cl_printf("bash -c %s", q);
    char *out = sh_out(cmd);
    cr_assert_str_eq(out, "pa%00b%FF%25%0A|p|bAQIDBAUGBwgJCwwNDg8QERI=|-| s z o| l");
    free(out);
    free(cmd);
    free(q);
    free(script);
    char *rm = cl_printf("rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
    free(rm);
}

/* A wrapper's report parsed: the status and both outputs exactly; none
 * when it does not start with the mark; cut, trailing bytes, a status past
 * 255, a "-" field and a bad field refused. */
Test(provider, report_parse_takes_the_status_and_both_outputs)
{
    cl_buf o = { 0 }, e = { 0 };
    int code = -1;
    const char *ok = "SBX-OUT-t 7\npa%00b%FF\nbaGkK\n";
    cr_assert_eq(cl_report_parse(ok, strlen(ok), "SBX-OUT-t ", &o, &e, &code), 1);
    cr_assert_eq(code, 7);
    cr_assert_eq(o.len, 4);
    cr_assert_eq(memcmp(o.data, "a\0b\377", 4), 0);
    cr_assert_eq(e.len, 3);
    cr_assert_eq(memcmp(e.data, "hi\n", 3), 0);
    cl_buf_clear(&o);
    cl_buf_clear(&e);
    const char *empty = "SBX-OUT-t 0\np\np\n";
    code = -1;
    cr_assert_eq(cl_report_parse(empty, strlen(empty), "SBX-OUT-t ", &o, &e, &code), 1);
    cr_assert_eq(code, 0);
    cr_assert_eq(o.len, 0);
    cr_assert_eq(e.len, 0);
    code = -1;
    cr_assert_eq(cl_report_parse("", 0, "SBX-OUT-t ", &o, &e, &code), 0);
    cr_assert_eq(cl_report_parse(ok, strlen(ok), "SBX-OUT-u ", &o, &e, &code), 0);
    cr_assert_eq(cl_report_parse(NULL, 0, "SBX-OUT-t ", &o, &e, &code), 0);
    cr_assert_eq(code, -1);
    static const char *const bad[] = {
        "SBX-OUT-t 7\npa\n",                /* cut */
        "SBX-OUT-t 7\npa\npb",              /* the last newline missing */
        "SBX-OUT-t 7\npa\npb\nx",           /* trailing bytes */
        "SBX-OUT-t 256\npa\npb\n",          /* no status */
        "SBX-OUT-t \npa\npb\n",
        "SBX-OUT-t 7\n-\npb\n",             /* a report names no file */
        "SBX-OUT-t 7\npa\tb\npb\n",         /* a byte outside the range */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(cl_report_parse(bad[i], strlen(bad[i]), "SBX-OUT-t ", &o, &e, &code), -1,
                     "%s", bad[i]);
        cl_buf_clear(&o);
        cl_buf_clear(&e);
    }
    cr_assert_eq(code, -1);
}

/* resume's start and end over a plugin's struct: the head made from the
 * state (its id, the client, a workdir that is an absolute path), the
 * view and state handed over; on failure the struct freed by the plugin's
 * function, and an ended sandbox makes nothing. */
static int resume_frees;

static void resume_free(sbx_plugin_sandbox *sb)
{
    resume_frees++;
    cl_sandbox_free(sb);
}

Test(provider, resume_new_and_end)
{
    static const char *const dead[] = { "shutdown", NULL };
    cl_resume_spec spec = { "acme", 1, "devbox_id", resume_get, "status", dead, NULL };
    char client[8];
    json_object *view = NULL, *state = NULL;
    wide_sandbox *w = cl_resume_new((sbx_plugin_client *)client, NULL,
                                    "{\"version\":1,\"devbox_id\":\"sb-run\",\"workdir\":\"/w\"}",
                                    &spec, sizeof(*w), &view, &state, NULL);
    cr_assert_not_null(w);
    cr_assert_str_eq(w->s.id, "sb-run");
    cr_assert_eq((void *)w->s.c, (void *)client);
    cr_assert_str_eq(w->s.workdir, "/w");
    cr_assert_null(w->url);
    cr_assert_str_eq(cl_json_str(view, "status"), "running");
    cr_assert_str_eq(cl_json_str(state, "devbox_id"), "sb-run");
    sbx_plugin_sandbox *out = NULL;
    cr_assert_eq(cl_resume_end(0, w, &out, view, state, resume_free), 0);
    cr_assert_eq((void *)out, (void *)w);
    cr_assert_eq(resume_frees, 0);
    cl_sandbox_free(w);

    w = cl_resume_new(NULL, NULL, "{\"version\":1,\"devbox_id\":\"sb-run\",\"workdir\":\"w/..\"}",
                      &spec, sizeof(*w), &view, &state, NULL);
    cr_assert_not_null(w);
    cr_assert_null(w->s.workdir);
    out = NULL;
    cr_assert_eq(cl_resume_end(-1, w, &out, view, state, resume_free), -1);
    cr_assert_null(out);
    cr_assert_eq(resume_frees, 1);

    view = state = (json_object *)&spec;
    cr_assert_null(cl_resume_new(NULL, NULL, "{\"version\":1,\"devbox_id\":\"sb-end\"}", &spec,
                                 sizeof(*w), &view, &state, NULL));
    cr_assert_null(view);
    cr_assert_null(state);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-end is gone (the provider no longer has it)");
}

/* The look of the refusal tests: "sb-run" runs, "sb-end" ended. */
static int look_gets;

static json_object *look_get(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                             long *status, const char *op, sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)op;
    cr_assert_null(error);
    look_gets++;
    *status = 200;
    return json_tokener_parse(strcmp(id, "sb-end") == 0 ? "{\"status\":\"shutdown\"}"
                                                        : "{\"status\":\"running\"}");
}

/* A call on a sandbox read by the provider's table: 2xx (and a 408 when
 * asked) is 0; a file call's 404 and 400 store nothing; another refusal
 * is the answer's error, or the gone error when the look says it ended;
 * a 404 that is the sandbox's own is gone without a look, and then
 * nothing more is sent. */
Test(provider, sandbox_request_reads_refusals)
{
    cl_backend = "acme";
    static const char *const dead[] = { "shutdown", NULL };
    static const cl_resume_spec rs = { "acme", 1, "sandbox_id", look_get, "status", dead, NULL };
    static const cl_call_spec own = { &rs, CL_CALLS_404_GONE | CL_CALLS_FILE_400 };
    static const cl_call_spec any = { &rs, CL_CALLS_LOOK_ANY };
    static const page_answer answers[] = {
        { 200, NULL, "{}" },
        { 404, NULL, "{\"message\":\"no such file\"}" },
        { 400, NULL, "{\"message\":\"not a file\"}" },
        { 408, NULL, "{}" },
        { 409, NULL, "{\"message\":\"busy\"}" },
        { 404, NULL, "{\"message\":\"no such sandbox\"}" },
        { 409, NULL, "{\"message\":\"ended\"}" },
    };
    cl_http *h = cl_http_new();
    page_server sv;
    page_start(&sv, answers, 7);
    char url[96];
#define REQ_URL(path) (snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv.port, (path)), \
                       strdup(url))
    cl_sandbox s, e;
    cr_assert_eq(cl_sandbox_init(&s, "sb-run"), 0);
    cr_assert_eq(cl_sandbox_init(&e, "sb-end"), 0);
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "read it" };
    cl_resp r = { 0 };
    sbx_error *err = NULL;
    cl_host = &rec_host;    /* errors stored in err are made */
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/a"), 0, &r, "read_file",
                                    &err), 0);
    cl_resp_clear(&r);
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/b"), CL_CALL_FILE, &r,
                                    "read_file", &err), -1);
    cl_resp_clear(&r);
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/c"), CL_CALL_FILE, &r,
                                    "read_file", &err), -1);
    cl_resp_clear(&r);
    cl_host = NULL;
    cr_assert_null(err);
    cr_assert_eq(look_gets, 1);     /* the 404 was looked into, the 400 not */
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/d"), CL_CALL_OK_408, &r,
                                    "exec", NULL), 0);
    cr_assert_eq(r.status, 408);
    cl_resp_clear(&r);
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/e"), 0, &r, "exec", NULL),
                 -1);
    cl_resp_clear(&r);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "read it: busy (HTTP 409)");
    cr_assert_eq(cl_gone_get(&s.gone), 0);
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/f"), 0, &r, "exec", NULL),
                 -1);
    cl_resp_clear(&r);
    cr_assert_eq(look_gets, 1);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-run is gone (the provider no longer has it)");
    cr_assert_eq(cl_sandbox_request(&e, h, &any, NULL, &rq, REQ_URL("/g"), 0, &r, "exec", NULL),
                 -1);
    cl_resp_clear(&r);
    cr_assert_eq(look_gets, 2);
    cr_assert_eq(cl_gone_get(&e.gone), 1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-end is gone (the provider no longer has it)");
    page_stop(&sv);
    cr_assert_eq(cl_sandbox_request(&s, h, &own, NULL, &rq, REQ_URL("/h"), 0, &r, "exec", NULL),
                 -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cr_assert_eq(sv.served, 7);
    cr_assert_str_eq(sv.lines[1], "GET /b HTTP/1.1");
    cr_assert_str_eq(sv.lines[6], "GET /g HTTP/1.1");
#undef REQ_URL
    cl_sandbox_clear(&s);
    cl_sandbox_clear(&e);
    cl_http_free(h);
}

/* The provider of the wake tests: each look answers the next state of the
 * script (its last one from then on); "404" is no such sandbox. */
static const char *const *wake_script;
static int wake_looks, wake_wakes;

static json_object *wake_get(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *id,
                             long *status, const char *op, sbx_error **error)
{
    (void)client;
    (void)ctx;
    (void)id;
    (void)op;
    (void)error;
    const char *st = wake_script[wake_looks];
    if (wake_script[wake_looks + 1])
        wake_looks++;
    *status = strcmp(st, "404") == 0 ? 404 : 200;
    if (*status == 404)
        return NULL;
    json_object *j = json_object_new_object();
    if (*st)
        json_object_object_add(j, "status", json_object_new_string(st));
    return j;
}

static int wake_check(cl_sandbox *s, json_object *view, const char *state, const char *op,
                      sbx_error **error)
{
    (void)view;
    if (strcmp(state, "failed") != 0)
        return 0;
    cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "%s failed", s->id);
    return -1;
}

static int wake_wake(cl_sandbox *s, const sbx_call_ctx *ctx, const char *state, const char *op,
                     sbx_error **error)
{
    (void)s;
    (void)ctx;
    (void)op;
    (void)error;
    cr_assert_str_eq(state, "paused");
    wake_wakes++;
    return 0;
}

/* Waiting until a sandbox runs: a sleeping one woken once, a failed one
 * the check's error, an ended or unknown one gone, and the timeout naming
 * the state it stayed in. */
Test(provider, sandbox_wake)
{
    static const char *const dead[] = { "ended", NULL };
    static const char *const asleep[] = { "paused", NULL };
    static const cl_resume_spec rs = { "acme", 1, "sandbox_id", wake_get, "status", dead, NULL };
    static const cl_wake_spec ws = { &rs, "status", "unknown", "running", asleep, 5.0,
                                     wake_check, wake_wake };
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-1"), 0);

    static const char *const wakes[] = { "paused", "paused", "starting", "running", NULL };
    wake_script = wakes;
    cr_assert_eq(cl_sandbox_wake(&s, NULL, &ws, "resume", NULL), 0);
    cr_assert_eq(wake_wakes, 1);
    cr_assert_eq(wake_looks, 3);

    static const char *const fails[] = { "", "failed", NULL };
    wake_script = fails;
    wake_looks = 0;
    cr_assert_eq(cl_sandbox_wake(&s, NULL, &ws, "resume", NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CREATION_FAILED);
    cr_assert_str_eq(cl_last()->msg, "sb-1 failed");
    cr_assert_eq(cl_gone_get(&s.gone), 0);

    static const char *const ends[] = { "ended", NULL };
    wake_script = ends;
    wake_looks = 0;
    sbx_error *err = NULL;
    cl_host = &rec_host;
    cr_assert_eq(cl_sandbox_wake(&s, NULL, &ws, "start", &err), -1);
    cl_host = NULL;
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-1 is gone (the provider no longer has it)");
    cr_assert_not_null(err);
    cr_assert_str_eq(err->pairs, "sandbox_id=sb-1;reason=gone;status=ended;");
    free(err);
    cl_sandbox_clear(&s);

    cr_assert_eq(cl_sandbox_init(&s, "sb-2"), 0);
    static const char *const unknown[] = { "404", NULL };
    wake_script = unknown;
    wake_looks = 0;
    cr_assert_eq(cl_sandbox_wake(&s, NULL, &ws, "start", NULL), -1);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_NOT_FOUND);
    cl_sandbox_clear(&s);

    cr_assert_eq(cl_sandbox_init(&s, "sb-3"), 0);
    static const cl_wake_spec brief = { &rs, "status", "unknown", "running", NULL, 0.2, NULL,
                                        NULL };
    static const char *const slow[] = { "paused", "", NULL };
    wake_script = slow;
    wake_looks = 0;
    wake_wakes = 0;
    cr_assert_eq(cl_sandbox_wake(&s, NULL, &brief, "create", NULL), -1);
    cr_assert_eq(wake_wakes, 0);    /* nothing asleep for this table */
    cr_assert_eq(cl_last()->code, SBX_ERROR_TIMEOUT);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-3 reaching status running did not happen "
                                     "(it is unknown)");
    cl_sandbox_clear(&s);
}

/* The provider-side lifetime: the default without a timeout, else the
 * timeout rounded up with the margin; a timeout not above 0 refused. */
Test(provider, lifetime_s)
{
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq) };
    cr_assert_eq(cl_lifetime_s(&rq, "acme", 3600, 5, NULL), 3600);
    rq.set_fields = SBX_OPTION_TIMEOUT_SECS;
    rq.timeout_secs = 60;
    cr_assert_eq(cl_lifetime_s(&rq, "acme", 3600, 5, NULL), 65);
    rq.timeout_secs = 0.2;
    cr_assert_eq(cl_lifetime_s(&rq, "acme", 3600, 0, NULL), 1);
    rq.timeout_secs = 90.5;
    cr_assert_eq(cl_lifetime_s(&rq, "acme", 3600, 10, NULL), 101);
    rq.timeout_secs = -1;
    cr_assert_eq(cl_lifetime_s(&rq, "acme", 3600, 5, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend: timeout_secs -1: must be more than 0");
}

/* The upload of the env prelude's test: what it got, and whether it
 * fails. */
static char prelude_path[64], prelude_data[128];
static int prelude_fail;

static int prelude_up(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path,
                      const char *data, size_t n, const char *op, sbx_error **error)
{
    (void)sb;
    (void)ctx;
    (void)error;
    snprintf(prelude_path, sizeof prelude_path, "%s", path);
    snprintf(prelude_data, sizeof prelude_data, "%.*s", (int)n, data);
    if (prelude_fail)
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "upload: no answer");
    return prelude_fail ? -1 : 0;
}

/* A command's per-call environment through a file: its exports uploaded
 * to /tmp/.TAG.env and sourced (then removed) by the prelude; nothing for
 * no env; an upload that fails is its error, the prelude untouched. */
Test(provider, script_env_prelude)
{
    static char a[] = "A=1", b[] = "B=x y";
    char *env[] = { a, b, NULL };
    cl_script_proc p = { .env = env, .tag = "sbx-exec-00ff" };
    cl_buf pre = { 0 };
    cr_assert_eq(cl_script_env_prelude(&p, NULL, prelude_up, &pre, "exec"), 0);
    cr_assert_str_eq(prelude_path, "/tmp/.sbx-exec-00ff.env");
    char *want = cl_env_exports((const char *const *)env);
    cr_assert_str_eq(prelude_data, want);
    free(want);
    cr_assert_str_eq(pre.data, ". /tmp/.sbx-exec-00ff.env; rm -f /tmp/.sbx-exec-00ff.env\n");
    cl_buf_clear(&pre);
    char *none[] = { NULL };
    p.env = none;
    prelude_path[0] = '\0';
    cr_assert_eq(cl_script_env_prelude(&p, NULL, prelude_up, &pre, "exec"), 0);
    cr_assert_str_eq(prelude_path, "");
    cr_assert_null(pre.data);
    p.env = env;
    prelude_fail = 1;
    cr_assert_eq(cl_script_env_prelude(&p, NULL, prelude_up, &pre, "exec"), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "upload: no answer");
    cr_assert_null(pre.data);
    prelude_fail = 0;
}

/* The head's data plane: kept without its trailing slashes and freed with
 * the head; no URL keeps the one it had; the constructor with one wants
 * one. A call at the data plane goes to the plane's URL and the path; a
 * head without one sends nothing. */
Test(provider, sandbox_plane_and_its_calls)
{
    cl_backend = "acme";
    wide_sandbox *w = cl_sandbox_new_at(sizeof(*w), NULL, "sb-p", "/w", "http://h/sb-p//");
    cr_assert_not_null(w);
    cr_assert_str_eq(w->s.plane, "http://h/sb-p");
    cr_assert_str_eq(w->s.workdir, "/w");
    cr_assert_null(w->url);
    cr_assert_eq(cl_sandbox_set_plane(&w->s, NULL), -1);
    cr_assert_str_eq(w->s.plane, "http://h/sb-p");
    cr_assert_eq(cl_sandbox_set_plane(&w->s, "https://x.example/"), 0);
    cr_assert_str_eq(w->s.plane, "https://x.example");
    cl_sandbox_free(w);
    cr_assert_null(cl_sandbox_new_at(sizeof(*w), NULL, "sb-q", NULL, NULL));

    static const char *const dead[] = { "shutdown", NULL };
    static const cl_resume_spec rs = { "acme", 1, "sandbox_id", look_get, "status", dead, NULL };
    static const cl_call_spec own = { &rs, CL_CALLS_404_GONE };
    static const page_answer answers[] = {
        { 200, NULL, "{\"ok\":1}" },
        { 404, NULL, "{\"message\":\"no such sandbox\"}" },
    };
    cl_http *h = cl_http_new();
    page_server sv;
    page_start(&sv, answers, 2);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/sb/sb-run/", sv.port);
    cl_sandbox s;
    cr_assert_eq(cl_sandbox_init(&s, "sb-run"), 0);
    cl_req rq = { .method = "GET", .idempotent = CL_SAFE, .what = "read it" };
    cl_resp r = { 0 };
    cr_assert_eq(cl_plane_request(&s, h, &own, NULL, &rq, "/process?a=1", 0, &r, "exec", NULL),
                 -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_RESOURCE_EXHAUSTED);
    cr_assert_eq(sv.served, 0);
    cr_assert_eq(cl_sandbox_set_plane(&s, base), 0);
    cr_assert_eq(cl_plane_request(&s, h, &own, NULL, &rq, "/process?a=1", 0, &r, "exec", NULL),
                 0);
    cr_assert_eq(r.status, 200);
    cr_assert_null(rq.url);
    cl_resp_clear(&r);
    cr_assert_eq(cl_plane_request(&s, h, &own, NULL, &rq, "/files", 0, &r, "exec", NULL), -1);
    cl_resp_clear(&r);
    page_stop(&sv);
    cr_assert_eq(cl_gone_get(&s.gone), 1);
    cr_assert_str_eq(cl_last()->msg, "acme sandbox sb-run is gone (the provider no longer has it)");
    cr_assert_eq(sv.served, 2);
    cr_assert_str_eq(sv.lines[0], "GET /sb/sb-run/process?a=1 HTTP/1.1");
    cr_assert_str_eq(sv.lines[1], "GET /sb/sb-run/files HTTP/1.1");
    cl_sandbox_clear(&s);
    cr_assert_null(s.plane);
    cl_http_free(h);
}

/* The upload of the stdin tests: what it got, and whether it fails. */
static char stdin_path[64], stdin_shown[16], stdin_data[64];
static int stdin_fail;

static int stdin_up(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *path, int fd,
                    const char *shown, const char *op, sbx_error **error)
{
    (void)sb;
    (void)ctx;
    cr_assert_null(error);
    snprintf(stdin_path, sizeof stdin_path, "%s", path);
    snprintf(stdin_shown, sizeof stdin_shown, "%s", shown);
    ssize_t n = read(fd, stdin_data, sizeof stdin_data - 1);
    stdin_data[n > 0 ? n : 0] = '\0';
    if (stdin_fail)
        cl_fail(NULL, SBX_ERROR_CONNECTION, op, "upload: no answer");
    return stdin_fail ? -1 : 0;
}

/* A command's stdin through a file: what the descriptor holds uploaded to
 * DIR/.TAG.in and read from there (then removed) by the prelude; no stdin
 * is /dev/null and uploads nothing; an upload that fails is its error. */
Test(provider, script_stdin_file_and_prelude)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(write(fds[1], "in put", 6), 6);
    close(fds[1]);
    cl_script_proc p = { .stdin_fd = fds[0], .tag = "sbx-exec-00ff" };
    char path[CL_STDIN_PATH_MAX];
    cr_assert_eq(cl_script_stdin_file(&p, NULL, stdin_up, "/workspace", path, "exec"), 0);
    cr_assert_str_eq(path, "/workspace/.sbx-exec-00ff.in");
    cr_assert_str_eq(stdin_path, "/workspace/.sbx-exec-00ff.in");
    cr_assert_str_eq(stdin_shown, "stdin");
    cr_assert_str_eq(stdin_data, "in put");
    cl_buf pre = { 0 };
    cr_assert_eq(cl_script_stdin_prelude(&p, NULL, stdin_up, "/tmp", &pre, "exec"), 0);
    cr_assert_str_eq(stdin_path, "/tmp/.sbx-exec-00ff.in");
    cr_assert_str_eq(pre.data, "exec </tmp/.sbx-exec-00ff.in; rm -f /tmp/.sbx-exec-00ff.in\n");
    cl_buf_clear(&pre);
    stdin_fail = 1;
    cr_assert_eq(cl_script_stdin_prelude(&p, NULL, stdin_up, "/tmp", &pre, "exec"), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONNECTION);
    cr_assert_str_eq(cl_last()->msg, "upload: no answer");
    cr_assert_null(pre.data);
    stdin_fail = 0;
    close(fds[0]);

    p.stdin_fd = -1;
    stdin_path[0] = '\0';
    cr_assert_eq(cl_script_stdin_file(&p, NULL, stdin_up, "/tmp", path, "exec"), 0);
    cr_assert_str_eq(path, "/dev/null");
    cr_assert_eq(cl_script_stdin_prelude(&p, NULL, stdin_up, "/tmp", &pre, "exec"), 0);
    cr_assert_str_eq(pre.data, "exec </dev/null\n");
    cr_assert_str_eq(stdin_path, "");
    cl_buf_clear(&pre);
}

/* The places acme's options go to (7, NULL and 9 at first) and its table
 * of them, made by acme_table(): policy_id (a string), custom (a flag),
 * idle_secs (a count up to 86400), with room for one more entry before the
 * table's end. */
typedef struct acme_opts {
    int flag;
    char *name;
    long long count;
    cl_option table[5];
} acme_opts;

static void acme_table(acme_opts *o)
{
    *o = (acme_opts){ .flag = 7, .count = 9 };
    o->table[0] = (cl_option){ "policy_id", CL_OPTION_STRING, 0, &o->name };
    o->table[1] = (cl_option){ "custom", CL_OPTION_BOOL, 0, &o->flag };
    o->table[2] = (cl_option){ "idle_secs", CL_OPTION_COUNT, 86400, &o->count };
}

/* The create's backend_options by table: none stores nothing; known keys
 * with values of their type are stored (the strings as copies); a value
 * not JSON, an unknown key or a value of another type is refused naming
 * it, nothing stored. */
Test(provider, backend_options_by_table)
{
    acme_opts o;
    acme_table(&o);
    sbx_plugin_create_request rq = { .struct_size = sizeof(rq) };
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), 0);
    rq.backend_options = "";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), 0);
    cr_assert_eq(o.flag, 7);
    cr_assert_null(o.name);
    cr_assert_eq(o.count, 9);
    rq.backend_options = "{\"custom\":false,\"policy_id\":\"np-1\",\"idle_secs\":86400}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), 0);
    cr_assert_eq(o.flag, 0);
    cr_assert_str_eq(o.name, "np-1");
    cr_assert_eq(o.count, 86400);
    free(o.name);
    o.name = NULL;
    rq.backend_options = "{\"custom\":true}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), 0);
    cr_assert_eq(o.flag, 1);
    cr_assert_null(o.name);
    cr_assert_eq(o.count, 86400);

    sbx_error *err = NULL;
    cl_host = &rec_host;
    rq.backend_options = "{\"custom\":false,\"Frob\":1}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, &err), -1);
    cl_host = NULL;
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: unknown key \"Frob\" (known: "
                                     "\"policy_id\", \"custom\", \"idle_secs\")");
    cr_assert_str_eq(err->pairs, "name=Frob;known=\"policy_id\", \"custom\", \"idle_secs\";"
                                 "option=backend_options;");
    free(err);
    cr_assert_eq(o.flag, 1);
    rq.backend_options = "{\"custom\":\"yes\"}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: custom \"yes\" is not true or false");
    rq.backend_options = "{\"policy_id\":\"\"}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: policy_id \"\" is not a non-empty "
                                     "string without control characters");
    cr_assert_null(o.name);
    rq.backend_options = "{\"policy_id\":\"np\\nX: 1\"}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: policy_id \"np\\nX: 1\" is not a "
                                     "non-empty string without control characters");
    cr_assert_null(o.name);
    rq.backend_options = "{\"policy_id\":\"np-2\",\"idle_secs\":86401}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: idle_secs 86401 is not a whole "
                                     "number from 1 to 86400");
    cr_assert_null(o.name);
    rq.backend_options = "{\"idle_secs\":1.5}";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: idle_secs 1.5 is not a whole number "
                                     "from 1 to 86400");
    cr_assert_eq(o.count, 86400);
    rq.backend_options = "[1,2]";
    cr_assert_eq(cl_backend_options(&rq, "acme", o.table, NULL), -1);
    cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
    cr_assert_str_eq(cl_last()->msg, "acme backend_options: [1,2] is not a JSON object");
}

/* Client options by the same table: the keys it names are checked (the
 * others left alone), in the table's order, and stored when all are of
 * their type; an entry without a place is checked only. A value of another
 * type is refused naming the client option, nothing stored. */
Test(provider, client_options_by_table)
{
    acme_opts o;
    acme_table(&o);
    o.table[3] = (cl_option){ "team", CL_OPTION_STRING, 0, NULL };
    const char *backend = cl_backend;
    cl_backend = "acme";
    cr_assert_eq(cl_client_options(NULL, o.table, NULL), 0);
    json_object *cfg = json_tokener_parse("{\"api_url\":1,\"team\":\"t\"}");
    cr_assert_eq(cl_client_options(cfg, o.table, NULL), 0);
    json_object_put(cfg);
    cr_assert_eq(o.flag, 7);
    cr_assert_null(o.name);
    cr_assert_eq(o.count, 9);
    cfg = json_tokener_parse("{\"custom\":false,\"policy_id\":\"np-1\",\"idle_secs\":86400}");
    cr_assert_eq(cl_client_options(cfg, o.table, NULL), 0);
    json_object_put(cfg);
    cr_assert_eq(o.flag, 0);
    cr_assert_str_eq(o.name, "np-1");
    cr_assert_eq(o.count, 86400);
    free(o.name);
    o.name = NULL;

    static const struct {
        const char *cfg, *msg, *key;
    } bad[] = {
        { "{\"custom\":1}", "acme client option custom 1 is not true or false", "custom" },
        { "{\"policy_id\":\"\",\"custom\":true}",
          "acme client option policy_id \"\" is not a non-empty string without control "
          "characters", "policy_id" },
        { "{\"custom\":true,\"idle_secs\":0}",
          "acme client option idle_secs 0 is not a whole number from 1 to 86400", "idle_secs" },
        { "{\"policy_id\":\"np-2\",\"team\":null}",
          "acme client option team null is not a non-empty string without control characters",
          "team" },
        { "{\"policy_id\":\"ws\\r\\nX-Injected: 1\"}",
          "acme client option policy_id \"ws\\r\\nX-Injected: 1\" is not a non-empty string "
          "without control characters", "policy_id" },
        { "{\"policy_id\":\"np\\u0000-3\"}",
          "acme client option policy_id \"np\\u0000-3\" is not a non-empty string without "
          "control characters", "policy_id" },
        { "{\"policy_id\":\"np\\u007f\"}",
          "acme client option policy_id \"np\x7f\" is not a non-empty string without "
          "control characters", "policy_id" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sbx_error *err = NULL;
        cfg = json_tokener_parse(bad[i].cfg);
        cl_host = &rec_host;
        cr_assert_eq(cl_client_options(cfg, o.table, &err), -1, "%s", bad[i].cfg);
        cl_host = NULL;
        json_object_put(cfg);
        cr_assert_eq(cl_last()->code, SBX_ERROR_CONFIGURATION);
        cr_assert_str_eq(cl_last()->msg, bad[i].msg);
        char pairs[64];
        snprintf(pairs, sizeof pairs, "option=%s;", bad[i].key);
        cr_assert_str_eq(err->pairs, pairs);
        free(err);
        cr_assert_eq(o.flag, 0);
        cr_assert_null(o.name);
        cr_assert_eq(o.count, 86400);
    }
    cl_backend = backend;
}

/* The start of a resume that gets nothing: the state's id, client and a
 * workdir that is one (a bad one dropped); a state of another version is
 * refused, nothing made; the end puts the state. */
Test(provider, resume_state_reads_the_state_alone)
{
    char client[8];
    json_object *state = NULL;
    wide_sandbox *w = cl_resume_state((sbx_plugin_client *)client,
                                      "{\"version\":2,\"pod\":\"sbx-1\",\"workdir\":\"/w\","
                                      "\"namespace\":\"ns\"}", "acme", 2, "pod", sizeof(*w),
                                      &state, NULL);
    cr_assert_not_null(w);
    cr_assert_str_eq(w->s.id, "sbx-1");
    cr_assert_eq((void *)w->s.c, (void *)client);
    cr_assert_str_eq(w->s.workdir, "/w");
    cr_assert_null(w->url);
    cr_assert_str_eq(cl_json_str(state, "namespace"), "ns");
    sbx_plugin_sandbox *out = NULL;
    cr_assert_eq(cl_resume_end(0, w, &out, NULL, state, NULL), 0);
    cr_assert_eq((void *)out, (void *)w);
    cl_sandbox_free(w);

    w = cl_resume_state(NULL, "{\"version\":2,\"pod\":\"sbx-2\",\"workdir\":\"../w\"}", "acme", 2,
                        "pod", sizeof(*w), &state, NULL);
    cr_assert_not_null(w);
    cr_assert_null(w->s.workdir);
    resume_frees = 0;
    cr_assert_eq(cl_resume_end(-1, w, &out, NULL, state, resume_free), -1);
    cr_assert_eq(resume_frees, 1);

    state = (json_object *)client;
    cr_assert_null(cl_resume_state(NULL, "{\"version\":1,\"pod\":\"sbx-3\"}", "acme", 2, "pod",
                                   sizeof(*w), &state, NULL));
    cr_assert_null(state);
    cr_assert_eq(cl_last()->code, SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(cl_last()->msg, "acme session state: needs \"version\": 2 and a \"pod\"");
}
