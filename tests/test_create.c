/*
 * tests/test_create.c — creation: presets (format, lookup order, defaults
 * under explicit options, setup commands and their place in the creation
 * order, npm's prefix on local with a stand-in npm), the files option, the
 * workspace manifest (order, overlay, every entry kind, custom entries), and
 * undo on failure (the error names the step; nothing is left behind).
 *
 * Runs on SBX_TEST_BACKEND (default local). Every test gets a fresh TMPDIR
 * so "nothing left behind" is exact on local.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx/sbx.h>

#include "testutil.h"

static char *g_tmp;           /* this test's TMPDIR (sandboxes live here on local) */
static char *g_work;          /* host scratch space of the test */
static sbx_client *g_client;
static sbx_sandbox *g_sb;

static void setup(void)
{
    g_work = tu_mkdtemp("sbx-create-work"); /* before TMPDIR changes */
    g_tmp = tu_fresh_tmpdir();
    /* No user presets from the machine running the tests. */
    char *cfg = tu_strdup_printf("%s/config", g_work);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    free(cfg);
    unsetenv("SBX_PRESET_PATH");
    sbx_error *err = NULL;
    g_client = sbx_client_new(tu_backend(), &err);
    cr_assert_not_null(g_client, "client: %s", err ? sbx_error_get0_message(err) : "");
}

static void teardown(void)
{
    if (g_sb) {
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    sbx_client_free(g_client);
    g_client = NULL;
    if (g_work)
        tu_rmtree(g_work);
    free(g_work);
    g_work = NULL;
    if (g_tmp)
        tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(presets, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(files_option, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(workspace, .init = setup, .fini = teardown, .timeout = 60);

/* Runs a shell script in g_sb and checks exit 0 and the exact stdout. */
static void expect_sh(const char *script, const char *want)
{
    sbx_result *r = tu_sh(g_sb, script, 30);
    tu_assert_exit(r, 0);
    tu_assert_stdout(r, want);
    sbx_result_free(r);
}

/* Creation must fail with creation_failed naming @step, leaving nothing. */
static sbx_error *expect_create_fails(sbx_options *o, const char *step)
{
    sbx_error *err = NULL;
    sbx_sandbox *sb = sbx_sandbox_create(g_client, o, &err);
    cr_assert_null(sb, "create succeeded; expected a failure in step %s", step);
    cr_assert_not_null(err);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_CREATION_FAILED, "code %s: %s",
                 sbx_error_code_name(sbx_error_get_code(err)), sbx_error_get0_message(err));
    cr_assert_str_eq(sbx_error_get0_context(err, "step"), step);
    cr_assert_str_eq(sbx_error_get0_backend(err), tu_backend());
    cr_assert_str_eq(sbx_error_get0_op(err), "create");
    if (tu_backend_is_local())
        cr_assert_eq(tu_count_entries(g_tmp), 0, "a failed create left something in TMPDIR");
    return err;
}

static void register_preset(const char *json)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_preset_register(json, &err), 0, "register: %s",
                 err ? sbx_error_get0_message(err) : "");
}

/* ------------------------------------------------------------------ presets */

Test(presets, builtin_presets_are_listed_and_loadable)
{
    sbx_preset **list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_presets_list(&list, &n, NULL), 0);
    cr_assert_eq(n, 3, "%zu presets", n);
    cr_assert_str_eq(sbx_preset_get0_name(list[0]), "claude-code");
    cr_assert_str_eq(sbx_preset_get0_name(list[1]), "claude-code-codex");
    cr_assert_str_eq(sbx_preset_get0_name(list[2]), "codex");
    sbx_preset_list_free(list, n);

    sbx_preset *p = sbx_preset_load("claude-code", NULL);
    cr_assert_not_null(p);
    cr_assert_str_eq(sbx_preset_get0_image(p, "docker"),
                     "ghcr.io/bespokelabsai/sandbox/claude-code:v2");
    char *want_src = tu_strdup_printf("%s/claude-code.json", getenv("SBX_PRESET_DIR"));
    cr_assert_str_eq(sbx_preset_get0_source(p), want_src);
    free(want_src);
    char *json = sbx_preset_to_json(p);
    cr_assert(strstr(json, "npm install -g @anthropic-ai/claude-code") != NULL, "%s", json);
    cr_assert(strstr(json, "\"memory_mb\": 2048") != NULL, "%s", json);
    cr_assert(strstr(json, "\"timeout_secs\": 1800") != NULL, "%s", json);
    free(json);
    sbx_preset_free(p);

    p = sbx_preset_load("claude-code-codex", NULL);
    json = sbx_preset_to_json(p);
    cr_assert(strstr(json, "npm install -g @anthropic-ai/claude-code @openai/codex") != NULL,
              "%s", json);
    free(json);
    sbx_preset_free(p);
}

Test(presets, lookup_order_registered_path_user_builtin)
{
    char *pathdir = tu_strdup_printf("%s/path", g_work);
    char *userdir = tu_strdup_printf("%s/config/sbx/presets", g_work);
    char *cmd = tu_strdup_printf("mkdir -p '%s' '%s'", pathdir, userdir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    char *f = tu_strdup_printf("%s/codex.json", userdir);
    const char *user_doc = "{\"name\": \"codex\", \"description\": \"user\"}";
    tu_write_file(f, user_doc, strlen(user_doc), 0644);
    free(f);

    sbx_preset *p = sbx_preset_load("codex", NULL);
    cr_assert_str_eq(sbx_preset_get0_description(p), "user");
    sbx_preset_free(p);

    f = tu_strdup_printf("%s/codex.json", pathdir);
    const char *path_doc = "{\"name\": \"codex\", \"description\": \"path\"}";
    tu_write_file(f, path_doc, strlen(path_doc), 0644);
    free(f);
    setenv("SBX_PRESET_PATH", pathdir, 1);
    p = sbx_preset_load("codex", NULL);
    cr_assert_str_eq(sbx_preset_get0_description(p), "path");
    sbx_preset_free(p);

    register_preset("{\"name\": \"codex\", \"description\": \"registered\"}");
    p = sbx_preset_load("codex", NULL);
    cr_assert_str_eq(sbx_preset_get0_description(p), "registered");
    cr_assert_str_eq(sbx_preset_get0_source(p), "registered");
    sbx_preset_free(p);

    /* The list shows one entry per name: the one that wins. */
    sbx_preset **list = NULL;
    size_t n = 0;
    cr_assert_eq(sbx_presets_list(&list, &n, NULL), 0);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(sbx_preset_get0_name(list[2]), "codex");
    cr_assert_str_eq(sbx_preset_get0_description(list[2]), "registered");
    sbx_preset_list_free(list, n);
    free(pathdir);
    free(userdir);
}

Test(presets, bad_documents_name_the_problem)
{
    static const struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {"{\"name\": \"x\", \"memroy_mb\": 1}", "memroy_mb"},
        {"{\"description\": \"no name\"}", "name"},
        {"{\"name\": \"Bad Name\"}", "Bad Name"},
        {"{\"name\": \"x\", \"cpu\": 0}", "cpu"},
        {"{\"name\": \"x\", \"memory_mb\": 1.5}", "memory_mb"},
        {"{\"name\": \"x\", \"setup_commands\": \"echo\"}", "setup_commands"},
        {"{\"name\": \"x\", \"env\": {\"1BAD\": \"v\"}}", "1BAD"},
        {"{\"name\": \"x\", \"format\": 2}", "format"},
        {"{\"name\": \"x\", \"backend_setup_commands\": {\"docker\": [1]}}",
         "backend_setup_commands"},
        {"[1, 2]", "JSON object"},
        {"{\"name\": ", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sbx_error *err = NULL;
        sbx_preset *p = sbx_preset_parse(cases[i].json, &err);
        cr_assert_null(p, "accepted %s", cases[i].json);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        cr_assert(strstr(sbx_error_get0_message(err), cases[i].needle) != NULL,
                  "message \"%s\" does not name %s", sbx_error_get0_message(err),
                  cases[i].needle);
        sbx_error_clear(&err);
        cr_assert_eq(sbx_preset_register(cases[i].json, &err), -1);
        cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
        sbx_error_free(err);
    }
    sbx_error *err = NULL;
    cr_assert_null(sbx_preset_load("nosuch-preset", &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    cr_assert(strstr(sbx_error_get0_message(err), "nosuch-preset") != NULL);
    cr_assert_not_null(sbx_error_get0_context(err, "searched"));
    sbx_error_clear(&err);

    /* An unknown preset named in options fails the create, leaving nothing. */
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "nosuch-preset", NULL), 0);
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_NOT_FOUND);
    cr_assert_str_eq(sbx_error_get0_context(err, "option"), "preset");
    sbx_error_free(err);
    sbx_options_free(o);
    if (tu_backend_is_local())
        cr_assert_eq(tu_count_entries(g_tmp), 0);
}

Test(presets, values_are_defaults_under_explicit_options)
{
    register_preset("{\"name\": \"t-defaults\", \"memory_mb\": 4096, \"cpu\": 2,"
                    " \"timeout_secs\": 1, \"env\": {\"GREETING\": \"from preset\","
                    " \"KEEP\": \"preset keeps\"}}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "t-defaults", NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "GREETING", "from caller", NULL), 0);
    /* cpu and memory_mb come from the preset only: local, which cannot
     * enforce them, ignores them instead of refusing the create. */
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect_sh("printf '%s|%s' \"$GREETING\" \"$KEEP\"", "from caller|preset keeps");
    /* The preset's timeout_secs is the default exec timeout. */
    sbx_exec_request req = SBX_EXEC_REQUEST_INIT;
    req.shell = "sleep 20";
    double t0 = tu_now();
    sbx_result *r = tu_exec(g_sb, &req);
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(tu_now() - t0 < 1.0 + SBX_KILL_GRACE_SECS + 1.0);
    sbx_result_free(r);
    sbx_sandbox_destroy(g_sb, NULL);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;

    /* An explicit timeout wins over the preset's. */
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "t-defaults", NULL), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 30, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect_sh("sleep 1.5; echo done", "done\n");
}

Test(presets, setup_runs_after_workspace_unless_asked_first)
{
    const char *docs[] = {
        "{\"name\": \"t-order\", \"setup_commands\": [\"if [ -e \\\"$SANDBOX_ROOT/w/f.txt\\\" ];"
        " then echo after; else echo before; fi >> \\\"$SANDBOX_ROOT/order\\\"\","
        " \"echo second >> \\\"$SANDBOX_ROOT/order\\\"\"]}",
        "{\"name\": \"t-order\", \"setup_before_workspace\": true, \"setup_commands\":"
        " [\"if [ -e \\\"$SANDBOX_ROOT/w/f.txt\\\" ]; then echo after; else echo before; fi"
        " >> \\\"$SANDBOX_ROOT/order\\\"\", \"echo second >> \\\"$SANDBOX_ROOT/order\\\"\"]}",
    };
    const char *want[] = {"after\nsecond\n", "before\nsecond\n"};
    for (size_t i = 0; i < 2; i++) {
        register_preset(docs[i]);
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_preset(o, "t-order", NULL), 0);
        cr_assert_eq(sbx_options_add_file(o, "/w/f.txt", "x", 1, NULL), 0);
        g_sb = tu_create(g_client, o);
        sbx_options_free(o);
        expect_sh("cat \"$SANDBOX_ROOT/order\"", want[i]);
        sbx_sandbox_destroy(g_sb, NULL);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
}

Test(presets, failing_setup_names_the_step_and_leaves_nothing)
{
    register_preset("{\"name\": \"t-fail\", \"setup_commands\": [\"true\","
                    " \"echo broken install >&2; exit 3\", \"touch never\"]}");
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "t-fail", NULL), 0);
    sbx_error *err = expect_create_fails(o, "preset_setup");
    sbx_options_free(o);
    cr_assert_str_eq(sbx_error_get0_context(err, "exit_code"), "3");
    cr_assert_str_eq(sbx_error_get0_context(err, "command"), "echo broken install >&2; exit 3");
    cr_assert(strstr(sbx_error_get0_message(err), "broken install") != NULL, "%s",
              sbx_error_get0_message(err));
    sbx_error_free(err);
}

/* What a progress callback saw, event by event, with each step's output
 * gathered per stream (chunk boundaries are the transport's). */
typedef struct progress_log {
    char log[4096];
    char out[2][8192];
    size_t out_len[2];
    int bad;                  /* a report was malformed */
} progress_log;

static void record_progress(const sbx_progress *p, void *user_data)
{
    progress_log *l = user_data;
    size_t n = strlen(l->log);

    if (p->struct_size != sizeof(*p) || strcmp(p->step, "preset_setup") != 0 ||
        strcmp(p->name, "t-tail") != 0)
        l->bad = 1;
    switch (p->event) {
    case SBX_PROGRESS_STEP_START:
        l->out_len[0] = l->out_len[1] = 0;
        snprintf(l->log + n, sizeof(l->log) - n, "start %zu/%zu %s\n", p->index, p->count,
                 p->command);
        break;
    case SBX_PROGRESS_STEP_OUTPUT: {
        int i = p->stream == SBX_STREAM_STDERR;
        if (l->out_len[i] + p->len <= sizeof(l->out[i])) {
            memcpy(l->out[i] + l->out_len[i], p->data, p->len);
            l->out_len[i] += p->len;
        } else {
            l->bad = 1;
        }
        break;
    }
    case SBX_PROGRESS_STEP_END:
        if (!(p->duration_secs >= 0 && p->duration_secs < 30))
            l->bad = 1;
        snprintf(l->log + n, sizeof(l->log) - n,
                 "end %zu/%zu exit=%d timed_out=%d stdout=%zu stderr=%.*s\n", p->index,
                 p->count, p->exit_code, p->timed_out, l->out_len[0], (int)l->out_len[1],
                 l->out[1]);
        break;
    default:
        l->bad = 1;
    }
}

/*
 * A failing setup command: the progress callback sees each command start,
 * its output and its end; the error keeps the last 4096 bytes of each
 * stream (5000 bytes of stdout: the first 904 are dropped) as contexts
 * and in the message, since the sandbox that held the output is gone.
 */
Test(presets, failing_setup_reports_progress_and_keeps_the_output_tail)
{
    const char *cmd2 = "i=0; while [ $i -lt 500 ]; do printf '%09d' $i; echo; i=$((i+1)); done;"
                       " echo broken install >&2; exit 3";
    char *doc = tu_strdup_printf("{\"name\": \"t-tail\", \"setup_commands\": [\"echo one\","
                                 " \"%s\", \"touch never\"]}", cmd2);
    register_preset(doc);
    free(doc);
    progress_log *l = calloc(1, sizeof(*l));
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "t-tail", NULL), 0);
    cr_assert_eq(sbx_options_set_progress(o, record_progress, l, NULL), 0);
    sbx_error *err = expect_create_fails(o, "preset_setup");
    sbx_options_free(o);

    /* The whole stdout, and its last 4096 bytes. */
    char all[5001], *p = all;
    for (int i = 0; i < 500; i++)
        p += sprintf(p, "%09d\n", i);
    const char *tail = all + 5000 - 4096;
    char *want_log = tu_strdup_printf("start 1/3 echo one\n"
                                      "end 1/3 exit=0 timed_out=0 stdout=4 stderr=\n"
                                      "start 2/3 %s\n"
                                      "end 2/3 exit=3 timed_out=0 stdout=5000 stderr="
                                      "broken install\n\n", cmd2);
    cr_expect_str_eq(l->log, want_log);
    cr_expect_eq(l->bad, 0);
    cr_expect_eq(l->out_len[0], 5000);
    cr_expect(memcmp(l->out[0], all, 5000) == 0);
    cr_expect_str_eq(sbx_error_get0_context(err, "stdout_tail"), tail);
    cr_expect_str_eq(sbx_error_get0_context(err, "stderr_tail"), "broken install\n");
    cr_expect_str_eq(sbx_error_get0_context(err, "exit_code"), "3");
    cr_expect_str_eq(sbx_error_get0_context(err, "command"), cmd2);
    char *want = tu_strdup_printf("preset setup command 2 of 3 failed with exit code 3: %s\n"
                                  "--- stdout (last 4096 of 5000 bytes) ---\n%.4095s\n"
                                  "--- stderr ---\nbroken install", cmd2, tail);
    cr_expect_str_eq(sbx_error_get0_message(err), want);
    free(want);
    free(want_log);
    free(l);
    sbx_error_free(err);
}

/* NULL options are refused, naming the call. */
Test(presets, set_progress_checks_its_options)
{
    sbx_error *err = NULL;
    cr_assert_eq(sbx_options_set_progress(NULL, record_progress, NULL, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    cr_assert_str_eq(sbx_error_get0_message(err), "options is NULL");
    cr_assert_str_eq(sbx_error_get0_op(err), "set_progress");
    sbx_error_free(err);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_progress(o, NULL, NULL, NULL), 0);
    sbx_options_free(o);
}

/*
 * The claude-code preset on local with a stand-in npm placed first on the
 * caller's PATH: the setup command runs it with the preset's arguments, the
 * global prefix is inside the sandbox root, and the installed CLI is on the
 * PATH of later commands.
 */
Test(presets, claude_code_with_stand_in_npm)
{
    if (!tu_backend_is_local())
        return;
    char *bin = tu_strdup_printf("%s/bin", g_work);
    cr_assert_eq(mkdir(bin, 0755), 0);
    char *npm = tu_strdup_printf("%s/npm", bin);
    const char *script =
        "#!/bin/sh\n"
        "printf '%s\\n' \"$*\" >> \"$SANDBOX_ROOT/npm.log\"\n"
        "[ \"$1 $2\" = 'install -g' ] || exit 1\n"
        "mkdir -p \"$NPM_CONFIG_PREFIX/bin\"\n"
        "printf '#!/bin/sh\\necho \"claude 9.9.9 (stand-in)\"\\n' > \"$NPM_CONFIG_PREFIX/bin/claude\"\n"
        "chmod 755 \"$NPM_CONFIG_PREFIX/bin/claude\"\n";
    tu_write_file(npm, script, strlen(script), 0755);
    const char *old_path = getenv("PATH");
    char *path = tu_strdup_printf("%s:%s", bin, old_path ? old_path : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    /* A client made now: an out-of-process plugin sees the environment as
     * it was when its client was made. */
    sbx_error *cerr = NULL;
    sbx_client_free(g_client);
    g_client = sbx_client_new(tu_backend(), &cerr);
    cr_assert_not_null(g_client, "sbx_client_new: %s", cerr ? sbx_error_get0_message(cerr) : "");

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_preset(o, "claude-code", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect_sh("cat \"$SANDBOX_ROOT/npm.log\"", "install -g @anthropic-ai/claude-code\n");
    expect_sh("claude --version", "claude 9.9.9 (stand-in)\n");
    expect_sh("[ \"$NPM_CONFIG_PREFIX\" = \"$SANDBOX_ROOT/.npm-global\" ] && echo inside",
              "inside\n");
    expect_sh("command -v claude | sed \"s|^$SANDBOX_ROOT|ROOT|\"",
              "ROOT/.npm-global/bin/claude\n");
    free(bin);
    free(npm);
    free(path);
}

/* ------------------------------------------------------------- files option */

Test(files_option, files_are_written_in_order_and_replace)
{
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_add_file(o, "/a/b/c.txt", "first", 5, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "top.bin", "\0\1\2\377", 4, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "/a/b/c.txt", "second\n", 7, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "/empty", "", 0, NULL), 0);
    cr_assert_eq(sbx_options_is_set(o, SBX_OPTION_FILES), 1);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect_sh("cat \"$SANDBOX_ROOT/a/b/c.txt\"; od -An -tx1 \"$SANDBOX_ROOT/top.bin\";"
              " wc -c < \"$SANDBOX_ROOT/empty\"",
              "second\n 00 01 02 ff\n0\n");

    sbx_error *err = NULL;
    o = sbx_options_new();
    cr_assert_eq(sbx_options_add_file(o, "", "x", 1, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_free(err);
    sbx_options_free(o);
}

Test(files_option, a_file_that_cannot_be_written_fails_the_create)
{
    if (!tu_backend_is_local())
        return;
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_add_file(o, "/ok.txt", "ok", 2, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "../escape.txt", "no", 2, NULL), 0);
    sbx_error *err = expect_create_fails(o, "files");
    sbx_options_free(o);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), "../escape.txt");
    sbx_error_free(err);
}

/* ---------------------------------------------------------------- workspace */

static int custom_calls;

static int custom_entry(sbx_sandbox *sandbox, const char *dest, void *user_data,
                        sbx_error **error)
{
    custom_calls++;
    const char *text = user_data;
    return sbx_sandbox_write_file(sandbox, dest, text, strlen(text), error);
}

static int custom_freed;

static void custom_free(void *p)
{
    (void)p;
    custom_freed++;
}

static char *make_git_repo(const char *dir, const char *content)
{
    char *cmd = tu_strdup_printf(
        "set -e; mkdir -p '%s'; cd '%s'; git init -q -b main .; printf '%s' > hello.txt;"
        " git add hello.txt; git -c user.email=t@e -c user.name=t commit -qm one;"
        " git branch -q side; git checkout -q side; printf side > hello.txt;"
        " git -c user.email=t@e -c user.name=t commit -qam two; git checkout -q main",
        dir, dir, content);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    return strdup(dir);
}

Test(workspace, entries_apply_in_order_and_overlay)
{
    char *repo = tu_strdup_printf("%s/repo", g_work);
    free(make_git_repo(repo, "main\\n"));
    char *lf = tu_strdup_printf("%s/tool.sh", g_work);
    tu_write_file(lf, "#!/bin/sh\necho tool ran\n", 24, 0755);
    char *ld = tu_strdup_printf("%s/dir", g_work);
    char *cmd = tu_strdup_printf("mkdir -p '%s/sub' && printf inner > '%s/sub/in.txt' &&"
                                 " printf base > '%s/over.txt'", ld, ld, ld);
    cr_assert_eq(system(cmd), 0);
    free(cmd);

    sbx_manifest *m = sbx_manifest_new();
    cr_assert_eq(sbx_manifest_add_git_repo(m, "/src/repo", repo, NULL, 1, NULL), 0);
    cr_assert_eq(sbx_manifest_add_git_repo(m, "side", repo, "side", 0, NULL), 0);
    cr_assert_eq(sbx_manifest_add_file(m, "/w/a.txt", "one", 3, 0644, NULL), 0);
    cr_assert_eq(sbx_manifest_add_local_dir(m, "/w/d", ld, NULL), 0);
    cr_assert_eq(sbx_manifest_add_file(m, "/w/d/over.txt", "overlaid", 8, 0600, NULL), 0);
    cr_assert_eq(sbx_manifest_add_file(m, "/w/a.txt", "two", 3, 0644, NULL), 0);
    cr_assert_eq(sbx_manifest_add_local_file(m, "/bin2/tool.sh", lf, NULL), 0);
    cr_assert_eq(sbx_manifest_add_custom(m, "/w/custom.txt", custom_entry, "made by callback",
                                         custom_free, NULL), 0);
    cr_assert_eq(sbx_manifest_get_count(m), 8);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workspace(o, m, NULL), 0);
    sbx_manifest_free(m); /* the options keep their own reference */
    custom_calls = 0;
    custom_freed = 0;
    g_sb = tu_create(g_client, o);
    cr_assert_eq(custom_calls, 1);
    sbx_options_free(o);
    cr_assert_eq(custom_freed, 1, "user data freed %d times with the manifest", custom_freed);

    expect_sh("cd \"$SANDBOX_ROOT\" && cat src/repo/hello.txt side/hello.txt w/a.txt"
              " w/d/sub/in.txt w/d/over.txt w/custom.txt && echo &&"
              " stat -c '%a %n' w/d/over.txt bin2/tool.sh && bin2/tool.sh &&"
              " git -C src/repo rev-list --count HEAD",
              "main\nsidetwoinneroverlaidmade by callback\n600 w/d/over.txt\n"
              "755 bin2/tool.sh\ntool ran\n1\n");
    free(repo);
    free(lf);
    free(ld);
}

Test(workspace, creation_order_clone_files_manifest)
{
    char *repo = tu_strdup_printf("%s/proj", g_work);
    free(make_git_repo(repo, "from git"));
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_git_repo(o, repo, NULL, NULL), 0);
    /* The clone lands in ./proj; files overwrite it; the manifest overwrites files. */
    cr_assert_eq(sbx_options_add_file(o, "/proj/hello.txt", "from files", 10, NULL), 0);
    cr_assert_eq(sbx_options_add_file(o, "/proj/files-only.txt", "files", 5, NULL), 0);
    sbx_manifest *m = sbx_manifest_new();
    cr_assert_eq(sbx_manifest_add_file(m, "/proj/hello.txt", "from manifest", 13, 0644, NULL), 0);
    cr_assert_eq(sbx_options_set_workspace(o, m, NULL), 0);
    sbx_manifest_free(m);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect_sh("cd \"$SANDBOX_ROOT/proj\" && cat hello.txt files-only.txt && git log --format=%s",
              "from manifestfilesone\n");
    free(repo);
}

/*
 * A host repository carried into a sandbox that cannot see the host (on
 * bubblewrap) is bundled by git on this host first. The application
 * SIGKILLed while git writes that bundle leaves no file in TMPDIR: git
 * writes to a file that has no name (a stand-in git on PATH announces that
 * it began, waits 0.5 s so the kill lands, runs git and announces its end).
 */
Test(workspace, sigkill_while_a_host_repository_is_bundled_leaves_no_file)
{
    if (access("/usr/bin/bwrap", X_OK) != 0)
        cr_skip_test("bubblewrap is not installed");
    char *repo = tu_strdup_printf("%s/proj", g_work);
    free(make_git_repo(repo, "from git"));
    char *bin = tu_strdup_printf("%s/bin", g_work);
    cr_assert_eq(mkdir(bin, 0755), 0);
    char *started = tu_strdup_printf("%s/git-started", g_work);
    char *ended = tu_strdup_printf("%s/git-ended", g_work);
    char *git = tu_strdup_printf("%s/git", bin);
    char *script = tu_strdup_printf(
        "#!/bin/sh\ncase \"$*\" in *bundle*) : > '%s'; sleep 0.5;; esac\n"
        "/usr/bin/git \"$@\"; rc=$?\ncase \"$*\" in *bundle*) : > '%s';; esac\nexit $rc\n",
        started, ended);
    tu_write_file(git, script, strlen(script), 0755);
    char *path = tu_strdup_printf("%s:%s", bin, getenv("PATH"));

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        setenv("PATH", path, 1);
        sbx_options *o = sbx_options_new();
        sbx_options_set_git_repo(o, repo, NULL, NULL);
        sbx_sandbox *sb = sbx_create("bubblewrap", o, NULL);
        _exit(sb ? 0 : 1);
    }
    double t0 = tu_now();
    while (!tu_exists(started) && tu_now() - t0 < 30)
        usleep(5000);
    cr_assert(tu_exists(started), "git bundle never started");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    t0 = tu_now();
    while (!tu_exists(ended) && tu_now() - t0 < 10)
        usleep(5000);
    cr_assert(tu_exists(ended), "git bundle never ended");
    DIR *d = opendir(g_tmp);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        cr_assert(strncmp(e->d_name, "sbx-git-", 8) != 0, "%s/%s was left behind", g_tmp,
                  e->d_name);
    closedir(d);
    free(repo);
    free(bin);
    free(started);
    free(ended);
    free(git);
    free(script);
    free(path);
}

Test(workspace, failing_entry_names_step_and_dest)
{
    sbx_manifest *m = sbx_manifest_new();
    cr_assert_eq(sbx_manifest_add_file(m, "/w/ok.txt", "ok", 2, 0644, NULL), 0);
    char *missing = tu_strdup_printf("%s/no-such-file", g_work);
    cr_assert_eq(sbx_manifest_add_local_file(m, "/w/missing.txt", missing, NULL), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workspace(o, m, NULL), 0);
    sbx_manifest_free(m);
    sbx_error *err = expect_create_fails(o, "workspace");
    sbx_options_free(o);
    cr_assert_str_eq(sbx_error_get0_context(err, "dest"), "/w/missing.txt");
    cr_assert_str_eq(sbx_error_get0_context(err, "entry"), "local_file");
    cr_assert(strstr(sbx_error_get0_message(err), "no-such-file") != NULL, "%s",
              sbx_error_get0_message(err));
    sbx_error_free(err);

    /* A git repository that does not exist. */
    m = sbx_manifest_new();
    cr_assert_eq(sbx_manifest_add_git_repo(m, "/r", missing, NULL, 1, NULL), 0);
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workspace(o, m, NULL), 0);
    sbx_manifest_free(m);
    err = expect_create_fails(o, "workspace");
    sbx_options_free(o);
    cr_assert_str_eq(sbx_error_get0_context(err, "entry"), "git_repo");
    cr_assert_str_eq(sbx_error_get0_context(err, "exit_code"), "128");
    sbx_error_free(err);
    free(missing);
}

Test(workspace, bad_entries_are_refused_when_added)
{
    sbx_manifest *m = sbx_manifest_new();
    sbx_error *err = NULL;
    cr_assert_eq(sbx_manifest_add_file(m, "", "x", 1, 0644, &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_manifest_add_local_dir(m, "/d", "", &err), -1);
    cr_assert_eq(sbx_error_get_code(err), SBX_ERROR_INVALID_ARGUMENT);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_manifest_add_git_repo(m, "/r", "--upload-pack=x", NULL, 1, &err), -1);
    cr_assert(strstr(sbx_error_get0_message(err), "--upload-pack=x") != NULL);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_manifest_add_git_repo(m, "/r", "repo", NULL, -1, &err), -1);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_manifest_add_custom(m, "/c", NULL, NULL, NULL, &err), -1);
    sbx_error_clear(&err);
    cr_assert_eq(sbx_manifest_get_count(m), 0);
    sbx_manifest_free(m);
}
