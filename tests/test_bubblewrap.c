/*
 * test_bubblewrap.c — what the bubblewrap backend isolates: the host's
 * filesystem outside the sandbox tree, its processes, its network when
 * allow_internet=false, memory where the probe reports limits, and all of
 * it for an unprivileged user (uid 65534) too. The backend-neutral suites
 * run on bubblewrap through tests/bubblewrap.sh.
 *
 * Runs from the build directory (the nobody test runs
 * ./tests/test_conformance).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sbx/sbx.h>

#include "testutil.h"

static sbx_client *g_client;
static sbx_sandbox *g_sb;
static char *g_tmp;

static void setup(void)
{
    g_tmp = tu_fresh_tmpdir();
    sbx_error *err = NULL;
    g_client = sbx_client_new("bubblewrap", &err);
    cr_assert_not_null(g_client, "sbx_client_new(bubblewrap): %s",
                       err ? sbx_error_get0_message(err) : "");
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
    tu_rmtree(g_tmp);
    free(g_tmp);
    g_tmp = NULL;
}

TestSuite(bubblewrap, .init = setup, .fini = teardown, .timeout = 120);

static void expect(sbx_sandbox *sb, const char *script, int code, const char *out)
{
    sbx_result *r = tu_sh(sb, script, 30);
    tu_assert_exit(r, code);
    tu_assert_stdout(r, out);
    sbx_result_free(r);
}

Test(bubblewrap, host_filesystem_is_out_of_reach)
{
    /* A file of the host outside the sandbox tree. */
    char *secret = tu_strdup_printf("%s/host-secret", g_tmp);
    FILE *f = fopen(secret, "w");
    cr_assert_not_null(f);
    fputs("secret\n", f);
    fclose(f);
    g_sb = tu_create(g_client, NULL);
    cr_assert_str_eq(sbx_sandbox_get0_root(g_sb), "");

    char *s = tu_strdup_printf("cat %s 2>/dev/null; echo $?", secret);
    expect(g_sb, s, 0, "1\n");
    free(s);
    /* The system tree is read-only. */
    expect(g_sb, "touch /usr/x 2>&1 | grep -c 'Read-only file system'; test -e /usr/x; echo $?",
           0, "1\n1\n");
    expect(g_sb, "echo x > /etc/sbx-x 2>/dev/null; echo $?", 0, "2\n");
    /* No /root, /home, /run or /var of the host. */
    expect(g_sb, "for d in /root /home /run /var; do test -e $d && echo $d; done; echo done",
           0, "done\n");
    /* / is the sandbox's own root and writable; /tmp is private. */
    expect(g_sb, "echo hi > /f && cat /f && echo t > /tmp/t && echo $HOME $TMPDIR", 0,
           "hi\n/ /tmp\n");
    char *buf = NULL;
    size_t len = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/tmp/t", &buf, &len, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 2);
    cr_assert_eq(memcmp(buf, "t\n", 2), 0);
    free(buf);
    cr_assert(!tu_exists("/f"), "a write to the sandbox's / reached the host's /");
    /* A write through the host side lands where commands see it. */
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/w.txt", "from host", 9, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    expect(g_sb, "cat /w.txt", 0, "from host");
    free(secret);
}

Test(bubblewrap, host_processes_are_invisible)
{
    g_sb = tu_create(g_client, NULL);
    /* pid 1 is the supervisor; the host's processes (this test's among
     * them) are not there. */
    expect(g_sb, "tr '\\0' ' ' < /proc/1/cmdline", 0,
           "/.sbx/sbx-supervisor --control-fd=3 --init ");
    char *s = tu_strdup_printf("ls /proc | grep -c '^[0-9]*$' | awk '{print ($1 < 10)}'; "
                               "hostname");
    expect(g_sb, s, 0, "1\nsbx\n");
    free(s);
    /* Every process inside descends from pid 1. */
    expect(g_sb,
           "for p in $(ls /proc | grep '^[0-9]*$'); do "
           "  q=$p; while [ -r /proc/$q/stat ] && [ \"$q\" != 1 ]; do "
           "    q=$(sed 's/.*) . \\([0-9]*\\).*/\\1/' /proc/$q/stat 2>/dev/null) || break; "
           "    [ -n \"$q\" ] || break; done; "
           "  [ ! -r /proc/$p/stat ] || [ \"$q\" = 1 ] || echo \"$p not under 1\"; "
           "done; echo ok",
           0, "ok\n");
}

/* Names of the sbx-bwrap-* entries in @dir, space-separated, in @out. */
static void bwrap_dirs_left(const char *dir, char *out, size_t size)
{
    char *cmd = tu_strdup_printf("ls %s | grep '^sbx-bwrap-' | tr '\\n' ' '", dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    out[0] = '\0';
    if (!fgets(out, (int)size, p))
        out[0] = '\0';
    pclose(p);
    free(cmd);
}

/* The process that runs the plugin (a child of this test in process, its
 * plugin host out of process) SIGKILLed the moment the launcher starts,
 * before it ran any of its own code: nothing of the sandbox was made
 * before that (the launcher makes its directory, its keeper standing by
 * from then on), so no sbx-bwrap-* directory is left. The stand-in
 * launcher (SBX_SUPERVISOR) notes that it ran and kills its parent. */
Test(bubblewrap, a_create_killed_as_its_launcher_starts_leaves_no_directory)
{
    int inproc = getenv("SBX_PLUGIN_MODE") && strcmp(getenv("SBX_PLUGIN_MODE"), "inprocess") == 0;
    char *stub = tu_strdup_printf("%s/stub-launcher", g_tmp);
    char *marker = tu_strdup_printf("%s/stub-ran", g_tmp);
    FILE *f = fopen(stub, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho \"$1\" > '%s'\nkill -KILL $PPID\n", marker);
    fclose(f);
    cr_assert_eq(chmod(stub, 0755), 0);

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        sbx_error *err = NULL;
        setenv("SBX_SUPERVISOR", stub, 1);
        sbx_client *c = sbx_client_new("bubblewrap", &err);
        if (!c)
            _exit(2);
        sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
        _exit(sb ? 0 : sbx_error_get_code(err) == SBX_ERROR_CONNECTION ? 3 : 4);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (inproc)
        cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
    else
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status 0x%x", st);
    char ran[64] = "";
    f = fopen(marker, "r");
    cr_assert_not_null(f, "the stand-in launcher did not run");
    cr_assert_not_null(fgets(ran, sizeof ran, f));
    fclose(f);
    cr_expect_str_eq(ran, "--launch\n");
    char left[1024];
    bwrap_dirs_left(g_tmp, left, sizeof left);
    cr_expect_str_empty(left, "left in %s: %s", g_tmp, left);
    free(stub);
    free(marker);
}

/* As above with a root_dir of the caller's: its tmp/, which the sandbox
 * would make, is made by the launcher too (its keeper removes it), so the
 * root_dir is left as it was, empty. */
Test(bubblewrap, a_create_in_a_root_dir_killed_as_its_launcher_starts_leaves_no_tmp)
{
    char *stub = tu_strdup_printf("%s/stub-launcher", g_tmp);
    char *root = tu_strdup_printf("%s/rootdir", g_tmp);
    char *opts = tu_strdup_printf("{\"root_dir\": \"%s\"}", root);
    FILE *f = fopen(stub, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\nkill -KILL $PPID\n", f);
    fclose(f);
    cr_assert_eq(chmod(stub, 0755), 0);
    cr_assert_eq(mkdir(root, 0755), 0);

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        sbx_error *err = NULL;
        setenv("SBX_SUPERVISOR", stub, 1);
        sbx_client *c = sbx_client_new("bubblewrap", &err);
        sbx_options *o = sbx_options_new();
        if (!c || !o || sbx_options_set_backend_options(o, opts, &err) < 0)
            _exit(2);
        sbx_sandbox *sb = sbx_sandbox_create(c, o, &err);
        _exit(sb ? 0 : sbx_error_get_code(err) == SBX_ERROR_CONNECTION ? 3 : 4);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (getenv("SBX_PLUGIN_MODE") && strcmp(getenv("SBX_PLUGIN_MODE"), "inprocess") == 0)
        cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
    else
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status 0x%x", st);
    char left[1024];
    char *ls = tu_strdup_printf("ls -A %s | tr '\\n' ' '", root);
    FILE *p = popen(ls, "r");
    cr_assert_not_null(p);
    if (!fgets(left, sizeof left, p))
        left[0] = '\0';
    pclose(p);
    cr_expect_str_empty(left, "left in %s: %s", root, left);
    bwrap_dirs_left(g_tmp, left, sizeof left);
    cr_expect_str_empty(left, "left in %s: %s", g_tmp, left);
    free(ls);
    free(opts);
    free(root);
    free(stub);
}

/* A sandbox on a caller's root_dir that ends on its own (here its
 * lifetime, 2 s) leaves the directory as its commands left it: bwrap's
 * mount points in it (the system tree's names, .sbx) are removed by the
 * launcher's keeper, as destroy removes them; no destroy comes after an
 * expiry. Looked at every 50 ms for 10 s. */
Test(bubblewrap, an_expired_sandbox_leaves_its_root_dir_as_its_commands_left_it)
{
    char *root = tu_strdup_printf("%s/rootdir", g_tmp);
    char *opts = tu_strdup_printf("{\"root_dir\": \"%s\"}", root);
    char *ls = tu_strdup_printf("ls -A %s | tr '\\n' ' '", root);
    char left[1024] = "";
    sbx_error *err = NULL;
    cr_assert_eq(mkdir(root, 0755), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_not_null(o);
    cr_assert_eq(sbx_options_set_backend_options(o, opts, &err), 0);
    cr_assert_eq(sbx_options_set_timeout_secs(o, 2, &err), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect(g_sb, "echo data > /keepme", 0, "");
    for (int i = 0; i < 200; i++) {
        FILE *p = popen(ls, "r");
        cr_assert_not_null(p);
        if (!fgets(left, sizeof left, p))
            left[0] = '\0';
        pclose(p);
        if (strcmp(left, "keepme ") == 0)
            break;
        usleep(50000);
    }
    cr_expect_str_eq(left, "keepme ", "left in %s: %s", root, left);
    free(ls);
    free(opts);
    free(root);
}

/* As above, with the launcher itself run: the stand-in kills its parent,
 * then becomes the real launcher, which finds the library gone when it
 * says it is ready (a write to a pipe nobody reads) and must still remove
 * the directory it made. */
Test(bubblewrap, a_create_killed_as_its_launcher_runs_leaves_no_directory)
{
    int inproc = getenv("SBX_PLUGIN_MODE") && strcmp(getenv("SBX_PLUGIN_MODE"), "inprocess") == 0;
    const char *real = getenv("SBX_SUPERVISOR");
    char *stub = tu_strdup_printf("%s/stub-launcher", g_tmp);
    FILE *f = fopen(stub, "w");
    cr_assert_not_null(real);
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\nkill -KILL $PPID\nexec '%s' \"$@\"\n", real);
    fclose(f);
    cr_assert_eq(chmod(stub, 0755), 0);

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        sbx_error *err = NULL;
        setenv("SBX_SUPERVISOR", stub, 1);
        sbx_client *c = sbx_client_new("bubblewrap", &err);
        if (!c)
            _exit(2);
        sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
        _exit(sb ? 0 : sbx_error_get_code(err) == SBX_ERROR_CONNECTION ? 3 : 4);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (inproc)
        cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
    else
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "status 0x%x", st);
    /* The launcher's keeper removes it once the sandbox's process, which
     * never got the go, has ended: at once, bounded here by 10 s. */
    char left[1024];
    for (int i = 0; i < 200; i++) {
        bwrap_dirs_left(g_tmp, left, sizeof left);
        if (!left[0])
            break;
        usleep(50000);
    }
    cr_expect_str_empty(left, "left in %s: %s", g_tmp, left);
    free(stub);
}

/* A process creating and destroying sandboxes in a loop, SIGKILLed twelve
 * times at points spread over 40..590 ms (inside a create, a destroy, or
 * between): within 10 s of each kill no sbx-bwrap-* directory is left. A
 * destroy cut short after the sandbox ended (its rest removed by the
 * library) is finished by the launcher's keeper. */
Test(bubblewrap, a_create_destroy_loop_killed_leaves_no_directory)
{
    char left[1024];

    for (int k = 0; k < 12; k++) {
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            sbx_error *err = NULL;
            sbx_client *c = sbx_client_new("bubblewrap", &err);
            if (!c)
                _exit(2);
            for (int i = 0; i < 1000; i++) {
                sbx_sandbox *sb = sbx_sandbox_create(c, NULL, &err);
                if (!sb)
                    _exit(3);
                sbx_sandbox_destroy(sb, NULL);
                sbx_sandbox_free(sb);
            }
            _exit(0);
        }
        usleep((useconds_t)(40000 + 50000 * k));
        kill(pid, SIGKILL);
        int st = 0;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "kill %d: status 0x%x", k, st);
        for (int i = 0; i < 200; i++) {
            bwrap_dirs_left(g_tmp, left, sizeof left);
            if (!left[0])
                break;
            usleep(50000);
        }
        cr_assert_str_empty(left, "kill %d (after %d ms): left in %s: %s", k, 40 + 50 * k,
                            g_tmp, left);
    }
}

/* The client's warm sandboxes (bwrap.c): made ahead after a create of
 * the plain configuration, two of them, in @dir as .sbx-spare-XXXXXX.
 * Waits (at most 5 s) until there are exactly two and the init of each
 * runs (a process whose command line names "--spare=sbx-bwrap-XXXXXX");
 * puts their six characters in @names, the older first (made one after
 * the other, the older's directory was last modified first). */
static void wait_warm_sandboxes(const char *dir, char *names[2])
{
    char found[2][64] = { "", "" };
    int ok = 0;
    for (double end = tu_now() + 5.0; !ok && tu_now() < end; usleep(20000)) {
        char *cmd = tu_strdup_printf("ls -a %s | grep '^\\.sbx-spare-' | tr '\\n' ' '", dir);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        char line[256] = "";
        if (!fgets(line, sizeof line, p))
            line[0] = '\0';
        pclose(p);
        free(cmd);
        char a[64], b[64];
        int n = 0;
        if (sscanf(line, ".sbx-spare-%63s .sbx-spare-%63s %n", a, b, &n) != 2
            || line[n] != '\0' || strlen(a) != 6 || strlen(b) != 6)
            continue;
        ok = 1;
        const char *ab[2] = { a, b };
        for (int i = 0; i < 2 && ok; i++) {
            char *needle = tu_strdup_printf("spare=sbx-bwrap-%s", ab[i]);
            pid_t pids[4];
            ok = tu_procs_mentioning(needle, pids, 4) > 0;
            free(needle);
        }
        struct stat st[2];
        for (int i = 0; i < 2 && ok; i++) {
            char *path = tu_strdup_printf("%s/.sbx-spare-%s", dir, ab[i]);
            ok = stat(path, &st[i]) == 0;
            free(path);
        }
        if (!ok)
            continue;
        int later = st[0].st_mtim.tv_sec > st[1].st_mtim.tv_sec
                    || (st[0].st_mtim.tv_sec == st[1].st_mtim.tv_sec
                        && st[0].st_mtim.tv_nsec > st[1].st_mtim.tv_nsec);
        snprintf(found[0], sizeof found[0], "%s", later ? b : a);
        snprintf(found[1], sizeof found[1], "%s", later ? a : b);
    }
    cr_assert(ok, "no two warm sandboxes came up in %s", dir);
    names[0] = tu_strdup_printf("%s", found[0]);
    names[1] = tu_strdup_printf("%s", found[1]);
}

/* The older of the two warm sandboxes wait_warm_sandboxes() finds: the
 * one the next plain create takes. */
static char *wait_warm_sandbox(const char *dir)
{
    char *names[2];
    wait_warm_sandboxes(dir, names);
    free(names[1]);
    return names[0];
}

/* 1 when a mount table of any process (/proc/PID/mountinfo) names @s. */
static int mounts_name(const char *s)
{
    char *cmd = tu_strdup_printf("cat /proc/[0-9]*/mountinfo 2>/dev/null | grep -c -F '%s'", s);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = 0;
    if (fscanf(p, "%d", &n) != 1)
        n = 0;
    pclose(p);
    free(cmd);
    return n > 0;
}

/* After a plain create, the client makes the next sandbox ahead; the next
 * plain create takes it: its id is the warm sandbox's name, its directory
 * the renamed one, and it is what a cold one is (uid, root, network). */
Test(bubblewrap, a_plain_create_takes_the_warm_sandbox)
{
    g_sb = tu_create(g_client, NULL);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    char *name = wait_warm_sandbox(g_tmp);
    char *id = tu_strdup_printf("sbx-bwrap-%s", name);
    char *spare = tu_strdup_printf("%s/.sbx-spare-%s", g_tmp, name);
    char *meta = tu_strdup_printf("%s/%s", g_tmp, id);

    g_sb = tu_create(g_client, NULL);
    cr_assert_str_eq(sbx_sandbox_get0_id(g_sb), id);
    cr_assert(!tu_exists(spare), "%s is still there", spare);
    cr_assert(tu_exists(meta), "%s is not there", meta);
    char *want = tu_strdup_printf("%u\nsbx\n/ /tmp\nhi\n",
                                  getuid() == 0 ? 65534u : (unsigned)getuid());
    expect(g_sb, "id -u; hostname; echo $HOME $TMPDIR; echo hi > /tmp/t; cat /tmp/t", 0, want);
    free(want);
    /* Its init waited for the create that took it. */
    char *init = tu_strdup_printf("/.sbx/sbx-supervisor --control-fd=3 --init --spare=%s ", id);
    expect(g_sb, "tr '\\0' ' ' < /proc/1/cmdline", 0, init);
    free(init);
    /* The rename left the root's overlay as it was, naming no host path;
     * the file calls reach it. */
    expect(g_sb, "awk '$5 == \"/\" { print $4, $8; split($10, o, \",\"); "
           "print o[2], o[3], o[4] }' /proc/self/mountinfo", 0,
           "/ overlay\nlowerdir=lower upperdir=root workdir=work\n");
    char *gtmp = tu_strdup_printf("grep -c -F '%s' /proc/self/mountinfo /proc/1/mountinfo", g_tmp);
    expect(g_sb, gtmp, 1, "/proc/self/mountinfo:0\n/proc/1/mountinfo:0\n");
    free(gtmp);
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/w.txt", "warm", 4, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    expect(g_sb, "cat /w.txt", 0, "warm");
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    pid_t pids[4];
    cr_assert_eq(tu_wait_procs_gone(id, pids, 4, 5.0), 0, "a process of %s survived: %s", id,
                 tu_proc_describe(pids[0]));
    for (double end = tu_now() + 5.0; tu_exists(meta) && tu_now() < end;)
        usleep(20000);
    cr_assert(!tu_exists(meta), "%s is still there", meta);
    free(name);
    free(id);
    free(spare);
    free(meta);
}

/* A create of any other configuration starts cold and leaves the warm
 * sandbox to the next plain one. */
Test(bubblewrap, a_configured_create_leaves_the_warm_sandbox)
{
    g_sb = tu_create(g_client, NULL);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    char *name = wait_warm_sandbox(g_tmp);
    char *id = tu_strdup_printf("sbx-bwrap-%s", name);
    char *spare = tu_strdup_printf("%s/.sbx-spare-%s", g_tmp, name);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    cr_assert_str_neq(sbx_sandbox_get0_id(g_sb), id);
    cr_assert(tu_exists(spare), "the configured create took %s", spare);
    expect(g_sb, "tr '\\0' ' ' < /proc/1/cmdline", 0,
           "/.sbx/sbx-supervisor --control-fd=3 --init ");
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = tu_create(g_client, NULL);
    cr_assert_str_eq(sbx_sandbox_get0_id(g_sb), id);
    free(name);
    free(id);
    free(spare);
}

/* A loop that creates right after each destroy on one client: the two
 * warm sandboxes made ahead are taken in the order they were made, the
 * second by a create right after the first's destroy (the fill that
 * destroy let start still running); then the client makes two again and
 * the next create takes the older. client_free leaves nothing of the two
 * still waiting. */
Test(bubblewrap, creates_in_a_row_take_the_warm_sandboxes_oldest_first)
{
    g_sb = tu_create(g_client, NULL);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    char *names[2];
    for (int round = 0; round < 2; round++) {
        wait_warm_sandboxes(g_tmp, names);
        int rounds = round == 0 ? 2 : 1;
        for (int i = 0; i < rounds; i++) {
            char *id = tu_strdup_printf("sbx-bwrap-%s", names[i]);
            char *spare = tu_strdup_printf("%s/.sbx-spare-%s", g_tmp, names[i]);
            g_sb = tu_create(g_client, NULL);
            cr_assert_str_eq(sbx_sandbox_get0_id(g_sb), id, "round %d, create %d", round, i);
            cr_assert(!tu_exists(spare), "%s is still there", spare);
            expect(g_sb, "echo hi", 0, "hi\n");
            cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
            sbx_sandbox_free(g_sb);
            g_sb = NULL;
            free(id);
            free(spare);
        }
        free(names[0]);
        free(names[1]);
    }
    /* The two made for the last create wait; client_free removes them. */
    wait_warm_sandboxes(g_tmp, names);
    sbx_client_free(g_client);
    g_client = NULL;
    for (int i = 0; i < 2; i++) {
        char *spare = tu_strdup_printf("%s/.sbx-spare-%s", g_tmp, names[i]);
        cr_assert(!tu_exists(spare), "%s is still there after client_free", spare);
        char *needle = tu_strdup_printf("spare=sbx-bwrap-%s", names[i]);
        pid_t pids[4];
        size_t n = tu_wait_procs_gone(needle, pids, 4, 5.0);
        cr_assert_eq(n, 0, "a process of %s survived: %s", spare,
                     n ? tu_proc_describe(pids[0]) : "");
        free(needle);
        free(spare);
        free(names[i]);
    }
}

/* A client's process SIGKILLed (in process, and its plugin host's
 * application out of process) with its two warm sandboxes ready: within
 * 5 s no directory, process or mount of either is left. */
Test(bubblewrap, a_killed_client_leaves_no_warm_sandbox)
{
    const char *modes[] = { "inprocess", "outofprocess" };
    for (size_t m = 0; m < 2; m++) {
        int pp[2];
        cr_assert_eq(pipe(pp), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            close(pp[0]);
            setenv("SBX_PLUGIN_MODE", modes[m], 1);
            sbx_error *err = NULL;
            sbx_client *c = sbx_client_new("bubblewrap", &err);
            sbx_sandbox *sb = c ? sbx_sandbox_create(c, NULL, &err) : NULL;
            if (!sb)
                _exit(2);
            sbx_sandbox_destroy(sb, NULL);
            sbx_sandbox_free(sb);
            if (write(pp[1], "x", 1) != 1)
                _exit(3);
            pause();
            _exit(0);
        }
        close(pp[1]);
        char x;
        cr_assert_eq(read(pp[0], &x, 1), 1, "%s: the child failed", modes[m]);
        close(pp[0]);
        char *names[2];
        wait_warm_sandboxes(g_tmp, names);
        char *spare[2], *sname[2], *id[2];
        for (int i = 0; i < 2; i++) {
            spare[i] = tu_strdup_printf("%s/.sbx-spare-%s", g_tmp, names[i]);
            sname[i] = tu_strdup_printf(".sbx-spare-%s", names[i]);
            id[i] = tu_strdup_printf("sbx-bwrap-%s", names[i]);
            cr_assert(mounts_name(sname[i]), "%s: no mount of %s seen while it runs", modes[m],
                      sname[i]);
        }
        kill(pid, SIGKILL);
        int st = 0;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        double end = tu_now() + 5.0;
        for (int i = 0; i < 2; i++) {
            while ((tu_exists(spare[i]) || mounts_name(sname[i])) && tu_now() < end)
                usleep(20000);
            cr_assert(!tu_exists(spare[i]), "%s: %s is still there", modes[m], spare[i]);
            cr_assert(!mounts_name(sname[i]), "%s: a mount of %s is left", modes[m], sname[i]);
            pid_t pids[4];
            double left = end - tu_now();
            size_t n = tu_wait_procs_gone(id[i], pids, 4, left > 0 ? left : 0);
            cr_assert_eq(n, 0, "%s: a process of %s survived: %s", modes[m], spare[i],
                         n ? tu_proc_describe(pids[0]) : "");
        }
        pid_t pids[4];
        size_t n = tu_wait_procs_gone(g_tmp, pids, 4, 0);
        cr_assert_eq(n, 0, "%s: a process names %s: %s", modes[m], g_tmp,
                     n ? tu_proc_describe(pids[0]) : "");
        cr_assert_eq(tu_count_entries(g_tmp), 0, "%s: %d entries left in %s", modes[m],
                     tu_count_entries(g_tmp), g_tmp);
        for (int i = 0; i < 2; i++) {
            free(names[i]);
            free(spare[i]);
            free(sname[i]);
            free(id[i]);
        }
    }
}

/* A TCP listener on 127.0.0.1 of the host; returns its port. */
static int listen_loopback(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(*fd >= 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    cr_assert_eq(bind(*fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(*fd, 8), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(*fd, (struct sockaddr *)&sa, &sl), 0);
    return ntohs(sa.sin_port);
}

static const char connect_script[] =
    "python3 -c 'import socket,sys\n"
    "try:\n"
    "    socket.create_connection((\"127.0.0.1\", %d), 5); print(\"connected\")\n"
    "except OSError as e: print(type(e).__name__)'";

Test(bubblewrap, no_network_without_allow_internet)
{
    int lfd;
    int port = listen_loopback(&lfd);
    char *s = tu_strdup_printf(connect_script, port);

    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect(g_sb, s, 0, "ConnectionRefusedError\n");
    expect(g_sb, "awk 'NR > 2 { print $1 }' /proc/net/dev", 0, "lo:\n");

    /* With the network allowed, the same listener answers. */
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 1, NULL), 0);
    sbx_sandbox *open_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect(open_sb, s, 0, "connected\n");
    cr_assert_eq(sbx_sandbox_destroy(open_sb, NULL), 0);
    sbx_sandbox_free(open_sb);
    close(lfd);
    free(s);
}

/* The "exec_endpoint" of @sb's session state (a new reference), or NULL
 * when it names none; *@sup_pid gets its "supervisor_pid". */
static json_object *exec_endpoint_of(sbx_sandbox *sb, int64_t *sup_pid)
{
    sbx_error *err = NULL;
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "session_state: %s", err ? sbx_error_get0_message(err) : "");
    json_object *doc = json_tokener_parse(state), *data, *ep = NULL, *v;
    cr_assert(doc && json_object_object_get_ex(doc, "data", &data), "%s", state);
    cr_assert(json_object_object_get_ex(data, "supervisor_pid", &v), "%s", state);
    *sup_pid = json_object_get_int64(v);
    if (json_object_object_get_ex(data, "exec_endpoint", &ep))
        json_object_get(ep);
    json_object_put(doc);
    free(state);
    return ep;
}

/* A member of endpoint @ep as text ("" when absent). */
static const char *ep_str(json_object *ep, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(ep, key, &v) ? json_object_get_string(v) : "";
}

Test(bubblewrap, memory_limit_kills_with_137)
{
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(g_client, &caps, NULL), 0);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_memory_mb(o, 64, NULL), 0);
    if (!(caps & SBX_CAP_MEMORY_LIMIT)) {
        /* Not enforceable here: refused, naming the option. */
        sbx_error *err = NULL;
        cr_assert_null(sbx_sandbox_create(g_client, o, &err));
        sbx_options_free(o);
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, "memory_mb", NULL);
        sbx_error_free(err);
        cr_assert_eq(tu_count_entries(g_tmp), 0);
        return;
    }
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    /* Its commands go by the plugin, which reports their OOM kills. */
    int64_t sup = 0;
    cr_assert_null(exec_endpoint_of(g_sb, &sup), "an exec_endpoint with a memory limit");
    sbx_result *r = tu_sh(g_sb, "python3 -c 'b = bytearray(256 * 1024 * 1024); print(len(b))'",
                          60);
    tu_assert_exit(r, 137);
    cr_assert_eq(sbx_result_is_oom_killed(r), 1);
    tu_assert_stdout(r, "");
    sbx_result_free(r);
    /* Below the limit all is well, and the sandbox lives on. */
    expect(g_sb, "python3 -c 'b = bytearray(8 * 1024 * 1024); print(len(b))'", 0, "8388608\n");
    char *cg = tu_strdup_printf("/sys/fs/cgroup/memory/sbx-%s", sbx_sandbox_get0_id(g_sb));
    int v1 = tu_exists("/sys/fs/cgroup/memory");
    if (v1)
        cr_assert(tu_exists(cg), "no cgroup %s", cg);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    if (v1)
        cr_assert(!tu_exists(cg), "destroy left the cgroup %s", cg);
    free(cg);
}

/*
 * @sb's commands that run to their end cross no plugin host (the log @l's
 * calls from *@from): stdin, exact stdout, stderr and exit code, the
 * workdir @cwd inside, the sandbox's environment (@env_line: what its FOO
 * gives) with the command's own; a timeout ends the command's whole tree.
 * Its endpoint names the supervisor, pid 1 inside, by its host pid.
 */
static void runs_without_the_host(sbx_sandbox *sb, const tu_debug_log *l, off_t *from,
                                  const char *cwd, const char *env_line)
{
    sbx_error *err = NULL;
    int64_t sup = 0;
    json_object *ep = exec_endpoint_of(sb, &sup);
    cr_assert_not_null(ep, "no exec_endpoint");
    cr_assert_str_eq(ep_str(ep, "protocol"), "sbx-local");
    cr_assert_str_eq(ep_str(ep, "cwd"), cwd);
    /* Its own root: destroy goes there too, the caller renaming META. */
    cr_assert_str_eq(ep_str(ep, "destroy"), "");
    char *meta = tu_strdup_printf("%s/%s", g_tmp, sbx_sandbox_get0_id(sb));
    cr_assert_str_eq(ep_str(ep, "meta"), meta);
    free(meta);
    char *pid = tu_strdup_printf("%lld", (long long)sup);
    cr_assert_str_eq(ep_str(ep, "pid"), pid);
    free(pid);
    cr_assert(sup > 1);
    cr_assert_eq(tu_host_pid(sb, 1), (pid_t)sup, "the endpoint's pid is not the init's");
    json_object_put(ep);
    free(tu_host_calls_since(l, from));     /* session_state */

    const char *env[] = { "BAR=bar", NULL };
    sbx_exec_request rq = SBX_EXEC_REQUEST_INIT;
    rq.shell = "read x; echo \"got $x\"; echo err >&2; pwd; echo $FOO $BAR; exit 7";
    rq.env = env;
    rq.stdin_data = "line\n";
    rq.stdin_len = 5;
    sbx_result *r = sbx_sandbox_execute_command(sb, &rq, &err);
    cr_assert_not_null(r, "%s", err ? sbx_error_get0_message(err) : "");
    char *want = tu_strdup_printf("got line\n%s\n%s\n", cwd, env_line);
    tu_assert_stdout(r, want);
    tu_assert_stderr(r, "err\n");
    tu_assert_exit(r, 7);
    cr_assert_eq(sbx_result_is_oom_killed(r), 0);
    sbx_result_free(r);
    free(want);

    rq = (sbx_exec_request)SBX_EXEC_REQUEST_INIT;
    rq.shell = "sleep 300 & echo $! > /tmp/bg.pid; sleep 300";
    rq.timeout_secs = 0.5;
    double t0 = tu_now();
    r = sbx_sandbox_execute_command(sb, &rq, &err);
    double took = tu_now() - t0;
    cr_assert_not_null(r, "timeout: %s", err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_result_is_timed_out(r), 1);
    cr_assert_eq(sbx_result_get_exit_code(r), 124);
    cr_assert(took < 5.0, "the timed-out command took %.2f s", took);
    sbx_result_free(r);
    char *calls = tu_host_calls_since(l, from);
    cr_assert_str_eq(calls, "", "the commands' calls to the plugin host: %s", calls);
    free(calls);
    /* Its background child ended with it (the init reaps it). */
    expect(sb, "p=$(cat /tmp/bg.pid); for i in $(seq 50); do [ -e /proc/$p ] || "
           "{ echo gone; exit; }; sleep 0.1; done; echo alive", 0, "gone\n");

    /* One with a working directory goes by the plugin. */
    free(tu_host_calls_since(l, from));
    rq = (sbx_exec_request)SBX_EXEC_REQUEST_INIT;
    rq.shell = "pwd";
    rq.cwd = "/tmp";
    r = sbx_sandbox_execute_command(sb, &rq, &err);
    cr_assert_not_null(r, "with a cwd: %s", err ? sbx_error_get0_message(err) : "");
    tu_assert_stdout(r, "/tmp\n");
    tu_assert_exit(r, 0);
    sbx_result_free(r);
    /* exec_free has no answer: a call that has one logs after it. */
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    free(state);
    calls = tu_host_calls_since(l, from);
    cr_assert_str_eq(calls, "exec_start,exec_end_info,exec_free,session_state",
                     "with a cwd: %s", calls);
    free(calls);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The comma-separated @list with its items in strcmp order (malloc'd). */
static char *sorted_list(const char *list)
{
    char *copy = strdup(list), *items[64], *save = NULL;
    size_t n = 0;
    cr_assert_not_null(copy);
    for (char *t = strtok_r(copy, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
        items[n++] = t;
    qsort(items, n, sizeof(items[0]), cmp_str);
    char *out = calloc(1, strlen(list) + 1);
    cr_assert_not_null(out);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, items[i]);
    }
    free(copy);
    return out;
}

/* 1 when the captured debug log @l holds @needle. */
static int log_has(const tu_debug_log *l, const char *needle)
{
    struct stat st;
    cr_assert_eq(fstat(l->fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(pread(l->fd, buf, (size_t)st.st_size, 0), (ssize_t)st.st_size);
    buf[st.st_size] = '\0';
    int has = strstr(buf, needle) != NULL;
    free(buf);
    return has;
}

/*
 * Destroys @sb (out of process, its own root) through its exec endpoint:
 * the library's debug line says so, META (the endpoint's "meta") has its
 * trash name or is gone once destroy returns, and the plugin host's
 * destroy, sent without waiting for its answer, comes before the next
 * call (a probe) or soon after it: the host's calls from *@from are
 * @want (in strcmp order: the host serves calls concurrently); the keeper
 * removes the trash.
 */
static void destroy_at_the_endpoint(sbx_client *c, sbx_sandbox *sb, const tu_debug_log *l,
                                    off_t *from, const char *want)
{
    sbx_error *err = NULL;
    char *meta = tu_strdup_printf("%s/%s", g_tmp, sbx_sandbox_get0_id(sb));
    char *line = tu_strdup_printf("destroyed %s (through its exec endpoint)",
                                  sbx_sandbox_get0_id(sb));
    cr_assert(tu_exists(meta), "no %s before destroy", meta);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    cr_assert(!tu_exists(meta), "%s is there after destroy", meta);
    cr_assert(log_has(l, line), "no \"%s\" in the debug log", line);
    uint64_t caps = 0;
    cr_assert_eq(sbx_client_probe(c, &caps, NULL), 0);
    /* The host serves each call on a thread of its own: the unwaited
     * destroy may log after the probe. */
    char *calls = tu_host_calls_since(l, from);
    for (int i = 0; i < 100 && !strstr(calls, "destroy"); i++) {
        usleep(50 * 1000);
        char *more = tu_host_calls_since(l, from);
        char *both = tu_strdup_printf("%s%s%s", calls, calls[0] && more[0] ? "," : "", more);
        free(calls);
        free(more);
        calls = both;
    }
    char *sorted = sorted_list(calls);
    cr_assert_str_eq(sorted, want, "the plugin host's calls: %s", calls);
    free(sorted);
    free(calls);
    char *trash = tu_strdup_printf("%s/.sbx-trash-%s", g_tmp, sbx_sandbox_get0_id(sb));
    for (int i = 0; i < 100 && tu_exists(trash); i++)
        usleep(50 * 1000);
    cr_assert(!tu_exists(trash), "the keeper left %s", trash);
    free(trash);
    free(line);
    free(meta);
}

/*
 * Out of process, a command that runs to its end goes straight to the
 * sandbox's supervisor, its init (its session state's exec_endpoint), on a
 * sandbox started cold with a workdir and an environment and on a plain
 * one that took the warm sandbox; so does destroy, the caller renaming
 * the sandbox's directory for the keeper to remove once the namespace
 * ended. A sandbox with a memory limit names no endpoint
 * (memory_limit_kills_with_137); one in a caller's root_dir takes no
 * DESTROY there (root_dir_is_a_host_directory_and_refuses_system_ones).
 */
Test(bubblewrap, a_command_to_its_end_does_not_cross_the_plugin_host)
{
    tu_debug_log l;
    off_t from = 0;
    sbx_error *err = NULL;
    setenv("SBX_TEST_BACKEND", "bubblewrap", 1);     /* for tu_host_pid */
    tu_debug_log_start(&l);
    sbx_client *c = sbx_client_new_with_mode("bubblewrap", SBX_PLUGIN_MODE_OUT_OF_PROCESS, &err);
    cr_assert_not_null(c, "%s", err ? sbx_error_get0_message(err) : "");

    char *inside = tu_strdup_printf("/work-%d", (int)getpid());
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, inside, NULL), 0);
    cr_assert_eq(sbx_options_set_env(o, "FOO", "foo", NULL), 0);
    sbx_sandbox *sb = tu_create(c, o);
    sbx_options_free(o);
    runs_without_the_host(sb, &l, &from, inside, "foo bar");
    /* Its workdir gone, a command cannot start, in the plugin's words. */
    char *rm = tu_strdup_printf("cd / && rmdir %s && echo gone", inside);
    expect(sb, rm, 0, "gone\n");
    free(rm);
    free(tu_host_calls_since(&l, &from));
    err = tu_exec_fail(sb, &(sbx_exec_request){ .struct_size = sizeof(sbx_exec_request),
                                               .shell = "true" }, SBX_ERROR_NOT_FOUND);
    char *want = tu_strdup_printf("working directory \"%s\" does not exist in sandbox %s",
                                  inside, sbx_sandbox_get0_id(sb));
    cr_assert_str_eq(sbx_error_get0_message(err), want);
    cr_assert_str_eq(sbx_error_get0_context(err, "path"), inside);
    free(want);
    sbx_error_free(err);
    err = NULL;
    /* The exec crossed nothing; a not_found error has the library ask
     * whether the sandbox is gone (its record). */
    char *calls = tu_host_calls_since(&l, &from);
    cr_assert_str_eq(calls, "is_alive", "a command that cannot start: %s", calls);
    free(calls);
    destroy_at_the_endpoint(c, sb, &l, &from, "destroy,probe");
    sbx_sandbox_free(sb);

    /* Plain: the first starts cold, the next takes the warm one. */
    sb = tu_create(c, NULL);
    cr_assert_eq(sbx_sandbox_destroy(sb, &err), 0, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox_free(sb);
    char *name = wait_warm_sandbox(g_tmp);
    char *id = tu_strdup_printf("sbx-bwrap-%s", name);
    sb = tu_create(c, NULL);
    cr_assert_str_eq(sbx_sandbox_get0_id(sb), id);
    runs_without_the_host(sb, &l, &from, "/", "bar");
    /* Resumed, it names the same endpoint (its start time checked). */
    char *state = sbx_sandbox_session_state(sb, &err);
    cr_assert_not_null(state, "%s", err ? sbx_error_get0_message(err) : "");
    sbx_sandbox *again = sbx_sandbox_resume(c, state, &err);
    cr_assert_not_null(again, "resume: %s", err ? sbx_error_get0_message(err) : "");
    free(state);
    free(tu_host_calls_since(&l, &from));
    expect(again, "pwd; echo $BAR.", 0, "/\n.\n");
    calls = tu_host_calls_since(&l, &from);
    cr_assert_str_eq(calls, "", "a resumed sandbox's command: %s", calls);
    free(calls);
    sbx_sandbox_free(again);     /* a call with no answer */
    destroy_at_the_endpoint(c, sb, &l, &from, "destroy,probe,sandbox_free");
    sbx_sandbox_free(sb);
    sbx_client_free(c);
    free(tu_debug_log_stop(&l));
    free(name);
    free(id);
    free(inside);
}

Test(bubblewrap, bad_backend_options_and_image_are_refused)
{
    /* A key the backend does not know is a configuration error naming it. */
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"binds\":[]}", NULL), 0);
    sbx_error *err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, NULL);
    cr_assert_str_eq(sbx_error_get0_message(err),
                     "bubblewrap backend_options: unknown key \"binds\" (known: \"ro_binds\", "
                     "\"root_dir\")");
    cr_assert_str_eq(sbx_error_get0_context(err, "name"), "binds");
    sbx_error_free(err);
    /* A known key with a malformed value is invalid_argument. */
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, "{\"ro_binds\":\"/usr\"}", NULL), 0);
    err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "\"ro_binds\" must be an array", NULL);
    sbx_error_free(err);

    char *img = tu_strdup_printf("%s/no-image", g_tmp);
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_image(o, img, NULL), 0);
    err = NULL;
    cr_assert_null(sbx_sandbox_create(g_client, o, &err));
    sbx_options_free(o);
    tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, img, NULL);
    sbx_error_free(err);
    free(img);
    cr_assert_eq(tu_count_entries(g_tmp), 0, "a refused create left something in %s", g_tmp);
}

/* The whole text of a small host file ("" when unreadable). */
static char *slurp(const char *path)
{
    char buf[4096];
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return strdup(buf);
}

/* The line of host process @pid's status that starts with @key. */
static char *status_line(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    char *found = NULL;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0)
            found = strdup(line);
    fclose(f);
    cr_assert_not_null(found, "no %s in %s", key, path);
    return found;
}

/*
 * Whoever runs the library (root or uid 65534: privileges_as_nobody runs
 * these again as nobody), nothing in the sandbox is privileged: no
 * capabilities in any set, no new privileges, a seccomp filter, and uid
 * and gid 65534 inside and on the host.
 */
Test(bubblewrap, command_has_no_capabilities_and_is_not_host_root)
{
    g_sb = tu_create(g_client, NULL);
    static const char caps[] = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
                               "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
                               "CapAmb:\t0000000000000000\n";
    char *want = tu_strdup_printf("%sNoNewPrivs:\t1\nSeccomp:\t2\n", caps);
    expect(g_sb, "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
           0, want);
    /* The supervisor (pid 1) too. */
    expect(g_sb, "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/1/status",
           0, want);
    free(want);
    /* uid and gid 65534 inside, no other group. */
    expect(g_sb, "id -u; id -g; id -G", 0, "65534\n65534\n65534\n");
    /* On the host, the sandbox's bwrap and its pid 1 run as 65534 too. */
    pid_t bw = tu_bwrap_pid(sbx_sandbox_get0_id(g_sb));
    cr_assert_gt(bw, 0, "no bwrap process of %s", sbx_sandbox_get0_id(g_sb));
    setenv("SBX_TEST_BACKEND", "bubblewrap", 1);     /* for tu_host_pid */
    pid_t procs[2] = { bw, tu_host_pid(g_sb, 1) };
    for (size_t i = 0; i < 2; i++) {
        char *uid = status_line(procs[i], "Uid:"), *gid = status_line(procs[i], "Gid:");
        char *groups = status_line(procs[i], "Groups:");
        cr_assert_str_eq(uid, "Uid:\t65534\t65534\t65534\t65534\n", "pid %d", (int)procs[i]);
        cr_assert_str_eq(gid, "Gid:\t65534\t65534\t65534\t65534\n", "pid %d", (int)procs[i]);
        /* No supplementary group: nothing but blanks after the key. */
        const char *list = groups + strlen("Groups:");
        cr_assert_eq(list[strspn(list, " \t\n")], '\0', "pid %d: %s", (int)procs[i], groups);
        free(uid);
        free(gid);
        free(groups);
    }
}

/* Python's view of a system call's failure: "NAME ERRNO" or "NAME ok". */
static const char syscalls_script[] =
    "python3 -c '\n"
    "import ctypes, errno, platform\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "nr = {\"x86_64\": (250, 155), \"aarch64\": (219, 41)}[platform.machine()]\n"
    "def show(name, rc):\n"
    "    print(name, \"ok\" if rc != -1 else errno.errorcode[ctypes.get_errno()])\n"
    "show(\"remount\", libc.mount(None, b\"/etc\", None, 32 | 4096, None))\n"
    "show(\"remount_usr\", libc.mount(None, b\"/usr\", None, 32 | 4096, None))\n"
    "show(\"tmpfs\", libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None))\n"
    "show(\"pivot_root\", libc.syscall(nr[1], b\"/tmp\", b\"/tmp\"))\n"
    "show(\"keyctl\", libc.syscall(nr[0], 0, -3, 0))\n"
    "show(\"unshare_user\", libc.unshare(0x10000000))\n"
    "show(\"ptrace_traceme\", libc.ptrace(0, 0, None, None))\n"
    "show(\"personality\", libc.personality(ctypes.c_ulong(0x0400000)))\n"
    "print(\"query\", libc.personality(ctypes.c_ulong(0xffffffff)))\n"
    "'";

Test(bubblewrap, mounts_namespaces_and_kernel_calls_fail_with_eperm)
{
    g_sb = tu_create(g_client, NULL);
    /* keyctl, a user namespace, PTRACE_TRACEME and READ_IMPLIES_EXEC would
     * work for an unprivileged process: the seccomp filter refuses them. */
    expect(g_sb, syscalls_script, 0,
           "remount EPERM\nremount_usr EPERM\ntmpfs EPERM\npivot_root EPERM\n"
           "keyctl EPERM\nunshare_user EPERM\nptrace_traceme EPERM\npersonality EPERM\n"
           "query 0\n");
    expect(g_sb, "unshare -U true 2>&1; echo $?", 0,
           "unshare: unshare failed: Operation not permitted\n1\n");
    /* The sandbox still works: /tmp is still its own, writable. */
    expect(g_sb, "echo t > /tmp/t && cat /tmp/t", 0, "t\n");
}

Test(bubblewrap, host_tree_and_sysctls_are_unchanged)
{
    char *core_before = slurp("/proc/sys/kernel/core_pattern");
    cr_assert(core_before[0], "cannot read the host's core_pattern");
    char *etc_canary = tu_strdup_printf("/etc/sbx-canary-%d", (int)getpid());
    char *usr_canary = tu_strdup_printf("/usr/sbx-canary-%d", (int)getpid());
    cr_assert(!tu_exists(etc_canary) && !tu_exists(usr_canary));
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_allow_internet(o, 0, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    /* A write to a host-global sysctl (of the value it has, so that a
     * failure of this test changes nothing) is refused: /proc/sys is
     * read-only. */
    expect(g_sb,
           "python3 -c '\n"
           "import errno\n"
           "p = \"/proc/sys/kernel/core_pattern\"\n"
           "v = open(p).read()\n"
           "try:\n"
           "    f = open(p, \"w\"); f.write(v); f.close(); print(\"written\")\n"
           "except OSError as e: print(errno.errorcode[e.errno])'; "
           "awk '$5 == \"/proc/sys\" { split($6, o, \",\"); print o[1] }' /proc/self/mountinfo",
           0, "EROFS\nro\n");
    /* After the remount attempts, /etc and /usr are still read-only. */
    char *s = tu_strdup_printf("python3 -c 'import ctypes; ctypes.CDLL(None).mount(None, "
                               "b\"/etc\", None, 32 | 4096, None)'; "
                               "echo x > %s 2>/dev/null; echo $?; touch %s 2>/dev/null; "
                               "echo $?", etc_canary, usr_canary);
    expect(g_sb, s, 0, "2\n1\n");
    free(s);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert(!tu_exists(etc_canary), "the sandbox wrote %s on the host", etc_canary);
    cr_assert(!tu_exists(usr_canary), "the sandbox wrote %s on the host", usr_canary);
    char *core_after = slurp("/proc/sys/kernel/core_pattern");
    cr_assert_str_eq(core_after, core_before);
    free(core_before);
    free(core_after);
    free(etc_canary);
    free(usr_canary);
}

/* /proc names no host path of the sandbox's root: "/" is a mount of its
 * own (the overlay whose upper layer is the root directory, its layers
 * named relative to the sandbox's directory), and the root directory's host
 * path appears nowhere. */
Test(bubblewrap, mountinfo_names_no_host_path_of_the_root)
{
    g_sb = tu_create(g_client, NULL);
    expect(g_sb, "awk '$5 == \"/\" { print $4, $8; split($10, o, \",\"); "
           "print o[2], o[3], o[4] }' /proc/self/mountinfo", 0,
           "/ overlay\nlowerdir=lower upperdir=root workdir=work\n");
    sbx_result *r = tu_sh(g_sb, "cat /proc/self/mountinfo /proc/1/mountinfo /proc/mounts", 10);
    tu_assert_exit(r, 0);
    size_t len = 0;
    const char *out = sbx_result_get0_stdout(r, &len);
    char *text = strndup(out, len);
    char *root = tu_strdup_printf("%s/%s/root", g_tmp, sbx_sandbox_get0_id(g_sb));
    cr_assert(tu_exists(root), "the sandbox's root is not %s", root);
    cr_assert(len > 0 && strstr(text, " / / ") != NULL, "no root mount in:\n%.1500s", text);
    const char *at = strstr(text, root);
    cr_assert(at == NULL, "the host path %s shows: %.300s", root, at);
    free(root);
    free(text);
    sbx_result_free(r);
    /* The files are where the file calls find them. */
    expect(g_sb, "echo in > /in.txt", 0, "");
    char *buf = NULL;
    size_t n = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, "/in.txt", &buf, &n, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(n, 3);
    cr_assert_eq(memcmp(buf, "in\n", 3), 0);
    free(buf);
}

/*
 * What the sandbox and the file calls create belongs to the sandbox's user,
 * and both may change what the other made; a caller's root_dir is the
 * sandbox's for its life and its owner's again after destroy.
 */
Test(bubblewrap, files_belong_to_the_sandbox_user)
{
    char *wd = tu_strdup_printf("%s/wd", g_tmp);
    cr_assert_eq(mkdir(wd, 0755), 0);
    struct stat st;
    cr_assert_eq(stat(wd, &st), 0);
    uid_t owner = st.st_uid;
    gid_t group = st.st_gid;
    char *up = tu_strdup_printf("%s/up", g_tmp);
    cr_assert_eq(mkdir(up, 0755), 0);
    char *upf = tu_strdup_printf("%s/a.txt", up);
    tu_write_file(upf, "a\n", 2, 0644);

    sbx_options *o = sbx_options_new();
    char *bo = tu_strdup_printf("{\"root_dir\":\"%s\"}", wd);
    cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
    free(bo);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    cr_assert_eq(stat(wd, &st), 0);
    cr_assert_eq(st.st_uid, 65534);
    cr_assert_eq(st.st_gid, 65534);
    expect(g_sb, "echo made > /made && ls -ln /made | awk '{print $3, $4}'", 0,
           "65534 65534\n");
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_write_file(g_sb, "/sub/written", "w\n", 2, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(sbx_sandbox_upload_dir(g_sb, up, "/up", &err), 1, "%s",
                 err ? sbx_error_get0_message(err) : "");
    expect(g_sb, "echo more >> /sub/written && cat /sub/written && echo b >> /up/a.txt && "
           "cat /up/a.txt && touch /sub/x /up/y && echo ok", 0, "w\nmore\na\nb\nok\n");
    static const char *const made[] = { "made", "sub", "sub/written", "sub/x", "up",
                                        "up/a.txt", "up/y" };
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        char *p = tu_strdup_printf("%s/%s", wd, made[i]);
        cr_assert_eq(lstat(p, &st), 0, "%s: %s", p, strerror(errno));
        cr_assert_eq(st.st_uid, 65534, "%s belongs to uid %u", p, (unsigned)st.st_uid);
        cr_assert_eq(st.st_gid, 65534, "%s belongs to gid %u", p, (unsigned)st.st_gid);
        free(p);
    }
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    cr_assert_eq(stat(wd, &st), 0);
    cr_assert_eq(st.st_uid, owner, "destroy left the workdir to uid %u", (unsigned)st.st_uid);
    cr_assert_eq(st.st_gid, group);
    free(wd);
    free(up);
    free(upf);
}

/* The modification time of @path, in nanoseconds (-1 when it cannot be
 * read). */
static long long mtime_ns(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

/*
 * -w is a path inside the sandbox: /usr is the sandbox's own /usr (bound
 * read-only from the host, which stays untouched), a missing directory is
 * made in the sandbox's root, as its user, and never on the host; one in
 * the read-only system tree that does not exist, /proc and relative paths
 * are refused naming it.
 */
Test(bubblewrap, workdir_is_a_path_inside)
{
    long long usr_before = mtime_ns("/usr");
    cr_assert(usr_before >= 0);
    static const char *const mount_points[] = { "/usr/usr", "/usr/etc", "/usr/proc",
                                                "/usr/dev", "/usr/.sbx", "/usr/tmp" };
    int existed[sizeof mount_points / sizeof mount_points[0]];
    for (size_t i = 0; i < sizeof mount_points / sizeof mount_points[0]; i++)
        existed[i] = tu_exists(mount_points[i]);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, "/usr", NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    expect(g_sb, "pwd; ls -d share; touch x 2>/dev/null; echo $?", 0, "/usr\nshare\n1\n");
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    cr_assert_eq(mtime_ns("/usr"), usr_before, "a sandbox start changed the host's /usr");
    for (size_t i = 0; i < sizeof mount_points / sizeof mount_points[0]; i++)
        cr_assert(existed[i] || !tu_exists(mount_points[i]), "%s was made on the host",
                  mount_points[i]);

    char *inside = tu_strdup_printf("/work-%d/a/b", (int)getpid());
    char *top = tu_strdup_printf("/work-%d", (int)getpid());
    o = sbx_options_new();
    cr_assert_eq(sbx_options_set_workdir(o, inside, NULL), 0);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    char *want = tu_strdup_printf("%s\n65534 65534\nin\n", inside);
    expect(g_sb, "pwd; stat -c '%u %g' .; echo in > f; cat f", 0, want);
    free(want);
    cr_assert(!tu_exists(top), "the workdir %s was made on the host", top);
    /* A command given no cwd starts there; the file calls see it too. */
    char *fpath = tu_strdup_printf("%s/f", inside);
    char *data = NULL;
    size_t len = 0;
    sbx_error *err = NULL;
    cr_assert_eq(sbx_sandbox_read_file(g_sb, fpath, &data, &len, &err), 0, "%s",
                 err ? sbx_error_get0_message(err) : "");
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(data, "in\n", 3), 0);
    free(data);
    free(fpath);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    sbx_sandbox_free(g_sb);
    g_sb = NULL;
    free(inside);
    free(top);

    static const struct {
        const char *workdir, *message;
    } refused[] = {
        { "/usr/sbx-no-such-dir", "workdir \"/usr/sbx-no-such-dir\" does not exist and cannot "
                                  "be made: /usr is bound read-only from the host in the "
                                  "sandbox" },
        { "/proc/x", "workdir \"/proc/x\" is refused and cannot be made: /proc is the "
                     "sandbox's own in the sandbox" },
        { "work/dir", "workdir \"work/dir\" must be an absolute path in the sandbox" },
        { "/a/../b", "workdir \"/a/../b\" must not contain \"..\"" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        o = sbx_options_new();
        cr_assert_eq(sbx_options_set_workdir(o, refused[i].workdir, NULL), 0);
        err = NULL;
        cr_assert_null(sbx_sandbox_create(g_client, o, &err), "workdir %s was accepted",
                       refused[i].workdir);
        sbx_options_free(o);
        tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, NULL);
        cr_assert_str_eq(sbx_error_get0_message(err), refused[i].message);
        cr_assert_str_eq(sbx_error_get0_context(err, "path"), refused[i].workdir);
        sbx_error_free(err);
    }
    cr_assert_eq(tu_count_entries(g_tmp), 0, "a refused create left something in %s", g_tmp);
}

/*
 * root_dir: a host directory of the caller's becomes the sandbox's "/";
 * system directories are refused naming the path, and destroy leaves no
 * mount point bwrap made in the given directory.
 */
Test(bubblewrap, root_dir_is_a_host_directory_and_refuses_system_ones)
{
    static const struct {
        const char *given, *refused;
    } sys[] = { { "/", "/" }, { "/usr", "/usr" }, { "/etc", "/etc" }, { "/var", "/var" },
                { "/home", "/home" }, { "/usr/share", "/usr" }, { "/proc/1", "/proc" },
                { "/dev", "/dev" }, { "/boot", "/boot" }, { "/sys", "/sys" } };
    long long usr_before = mtime_ns("/usr");
    for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++) {
        if (!tu_exists(sys[i].given))
            continue;
        char *bo = tu_strdup_printf("{\"root_dir\":\"%s\"}", sys[i].given);
        sbx_options *o = sbx_options_new();
        cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
        free(bo);
        sbx_error *err = NULL;
        cr_assert_null(sbx_sandbox_create(g_client, o, &err), "root_dir %s was accepted",
                       sys[i].given);
        sbx_options_free(o);
        tu_assert_error(err, SBX_ERROR_INVALID_ARGUMENT, "is refused: a system directory",
                        NULL);
        cr_assert_str_eq(sbx_error_get0_context(err, "option"), "root_dir");
        char real[4096];
        cr_assert_not_null(realpath(sys[i].given, real));
        cr_assert_str_eq(sbx_error_get0_context(err, "path"), real);
        char *head = tu_strdup_printf("bubblewrap backend_options: root_dir %s", sys[i].given);
        cr_assert(strncmp(sbx_error_get0_message(err), head, strlen(head)) == 0, "%s",
                  sbx_error_get0_message(err));
        free(head);
        sbx_error_free(err);
    }
    cr_assert_eq(mtime_ns("/usr"), usr_before, "a refused root_dir changed the host's /usr");

    char *rd = tu_strdup_printf("%s/rd", g_tmp);
    cr_assert_eq(mkdir(rd, 0755), 0);
    char *bo = tu_strdup_printf("{\"root_dir\":\"%s\"}", rd);
    sbx_options *o = sbx_options_new();
    cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
    cr_assert_eq(sbx_options_set_workdir(o, "/w", NULL), 0);
    free(bo);
    g_sb = tu_create(g_client, o);
    sbx_options_free(o);
    /* Its destroy goes by the plugin, which waits for the namespace's end
     * to remove the mount points bwrap made in the caller's directory. */
    int64_t sup = 0;
    json_object *ep = exec_endpoint_of(g_sb, &sup);
    cr_assert_not_null(ep, "no exec_endpoint");
    cr_assert_str_eq(ep_str(ep, "destroy"), "false");
    cr_assert_str_eq(ep_str(ep, "meta"), "");
    json_object_put(ep);
    expect(g_sb, "pwd; echo hi > x; cat /etc/os-release >/dev/null && echo os", 0,
           "/w\nos\n");
    char *x = tu_strdup_printf("%s/w/x", rd);
    cr_assert(tu_exists(x), "the command's file is not at %s", x);
    free(x);
    cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
    /* Only what the command made: no empty mount point, no tmp. */
    cr_assert_eq(tu_count_entries(rd), 1, "%s holds %d entries after destroy", rd,
                 tu_count_entries(rd));
    free(rd);
}

/* The whole of a file the sandbox sees (NULL with *@err on failure). */
static char *read_in(sbx_sandbox *sb, const char *path, sbx_error **err)
{
    char *data = NULL;
    size_t len = 0;
    if (sbx_sandbox_read_file(sb, path, &data, &len, err) < 0)
        return NULL;
    return data;
}

/*
 * The file calls see what commands see, with a root the library made and
 * with a caller's root_dir alike: the system tree bound from the host is
 * readable and listed, and a write to it is refused as inside.
 */
Test(bubblewrap, file_calls_see_what_commands_see)
{
    char *host_os = slurp("/etc/os-release");
    cr_assert(host_os[0], "cannot read the host's /etc/os-release");
    char *rd = tu_strdup_printf("%s/rd", g_tmp);
    cr_assert_eq(mkdir(rd, 0755), 0);
    char *bo = tu_strdup_printf("{\"root_dir\":\"%s\"}", rd);
    for (int with_root_dir = 0; with_root_dir < 2; with_root_dir++) {
        sbx_options *o = sbx_options_new();
        if (with_root_dir)
            cr_assert_eq(sbx_options_set_backend_options(o, bo, NULL), 0);
        g_sb = tu_create(g_client, o);
        sbx_options_free(o);
        sbx_error *err = NULL;
        char *got = read_in(g_sb, "/etc/os-release", &err);
        cr_assert_not_null(got, "read_file /etc/os-release: %s",
                           err ? sbx_error_get0_message(err) : "");
        cr_assert_str_eq(got, host_os);
        free(got);
        sbx_file_info **list = NULL;
        size_t count = 0;
        cr_assert_eq(sbx_sandbox_list_files(g_sb, "/usr", &list, &count, &err), 0, "%s",
                     err ? sbx_error_get0_message(err) : "");
        int bin = 0, share = 0;
        for (size_t i = 0; i < count; i++) {
            bin |= strcmp(sbx_file_info_get0_name(list[i]), "bin") == 0
                   && sbx_file_info_is_dir(list[i]);
            share |= strcmp(sbx_file_info_get0_name(list[i]), "share") == 0;
        }
        sbx_file_info_list_free(list, count);
        cr_assert(bin && share, "list_files /usr has no bin/ or share/ (%zu entries)", count);
        cr_assert_eq(sbx_sandbox_write_file(g_sb, "/usr/sbx-canary", "x", 1, &err), -1);
        tu_assert_error(err, SBX_ERROR_WORKSPACE, "/usr/sbx-canary", "Read-only file system",
                        NULL);
        sbx_error_free(err);
        err = NULL;
        cr_assert(!tu_exists("/usr/sbx-canary"), "write_file wrote the host's /usr");
        cr_assert_eq(sbx_sandbox_destroy(g_sb, NULL), 0);
        sbx_sandbox_free(g_sb);
        g_sb = NULL;
    }
    free(bo);
    free(rd);
    free(host_os);
}

/* A client made now: an out-of-process plugin sees the environment as it
 * was when its client was made. */
static sbx_sandbox *create_with_fresh_client(sbx_error **err)
{
    sbx_client *c = sbx_client_new("bubblewrap", err);
    cr_assert_not_null(c, "sbx_client_new: %s", *err ? sbx_error_get0_message(*err) : "");
    sbx_sandbox *sb = sbx_sandbox_create(c, NULL, err);
    if (!sb)
        sbx_client_free(c);
    return sb;
}

Test(bubblewrap, missing_bwrap_is_a_configuration_error)
{
    setenv("SBX_BWRAP", "/nonexistent/bwrap", 1);
    sbx_error *err = NULL;
    cr_assert_null(create_with_fresh_client(&err));
    unsetenv("SBX_BWRAP");
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "/nonexistent/bwrap", NULL);
    sbx_error_free(err);
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", g_tmp, 1);
    err = NULL;
    cr_assert_null(create_with_fresh_client(&err));
    if (path)
        setenv("PATH", path, 1);
    free(path);
    tu_assert_error(err, SBX_ERROR_CONFIGURATION, "apt-get install bubblewrap", NULL);
    sbx_error_free(err);
    cr_assert_eq(tu_count_entries(g_tmp), 0);
}

/* Run by root, the sandbox's bwrap runs as uid 65534 and must pass through
 * the temporary directory: one it cannot enter is a configuration error
 * naming it, and nothing is left. Run by another user, the sandbox is that
 * user's and the same directory serves. */
Test(bubblewrap, tmpdir_out_of_reach_of_the_sandbox_user)
{
    char *closed = tu_strdup_printf("%s/closed", g_tmp);
    char *inner = tu_strdup_printf("%s/tmp", closed);
    cr_assert_eq(mkdir(closed, 0700), 0);
    cr_assert_eq(mkdir(inner, 0777), 0);
    cr_assert_eq(chmod(inner, 0777), 0);
    setenv("TMPDIR", inner, 1);
    sbx_error *err = NULL;
    sbx_sandbox *sb = create_with_fresh_client(&err);
    setenv("TMPDIR", g_tmp, 1);
    if (getuid() == 0) {
        cr_assert_null(sb);
        tu_assert_error(err, SBX_ERROR_CONFIGURATION, closed, "uid 65534", "TMPDIR", NULL);
        sbx_error_free(err);
        cr_assert_eq(tu_count_entries(inner), 0, "a refused create left something in %s",
                     inner);
    } else {
        cr_assert_not_null(sb, "%s", err ? sbx_error_get0_message(err) : "");
        char *me = tu_strdup_printf("%u\n", (unsigned)getuid());
        expect(sb, "id -u", 0, me);
        free(me);
        cr_assert_eq(sbx_sandbox_destroy(sb, NULL), 0);
        sbx_sandbox_free(sb);
        cr_assert_eq(tu_count_entries(inner), 0);
    }
    free(closed);
    free(inner);
}

/*
 * Runs the staged test program @program ("test_conformance" or
 * "test_bubblewrap") as uid/gid 65534 with Criterion's @filter (NULL: all)
 * and asserts that all of it passed (@ntests tests, when not 0).
 */
static void run_as_nobody(const char *program_name, const char *filter, int ntests)
{
    char *dir = tu_mkdtemp("nobody");
    cr_assert_eq(chmod(dir, 01777), 0);
    cr_assert_eq(chmod(g_tmp, 0711), 0);    /* nobody passes through to @dir */
    /*
     * The build tree may sit below a directory only root can enter (a
     * mktemp -d checkout): stage the test program, libsbx, the plugin, the
     * supervisor and the plugin host where nobody can read them. libtool keeps the real
     * programs and libraries in .libs/.
     */
    char *bin = tu_mkdtemp("nobody-bin");
    char *stage = tu_strdup_printf(
        "set -e; d='%s'; mkdir -p \"$d/lib\" \"$d/plugins\";"
        " cp -P .libs/libsbx.so* \"$d/lib/\";"
        " cp tests/.libs/%s \"$d/%s\";"
        " cp plugins/local/.libs/libsbx-bubblewrap.so \"$d/plugins/\";"
        " cp \"$SBX_SUPERVISOR\" \"$d/sbx-supervisor\";"
        " cp \"$SBX_PLUGIN_HOST\" \"$d/sbx-plugin-host\";"
        " chmod -R a+rX \"$d\"; chmod 0755 \"$d\"", bin, program_name, program_name);
    cr_assert_eq(system(stage), 0, "staging for nobody failed: %s", stage);
    free(stage);
    char *lib_path = tu_strdup_printf("%s/lib", bin);
    char *plugin_path = tu_strdup_printf("%s/plugins", bin);
    char *supervisor = tu_strdup_printf("%s/sbx-supervisor", bin);
    char *plugin_host = tu_strdup_printf("%s/sbx-plugin-host", bin);
    char *program = tu_strdup_printf("%s/%s", bin, program_name);
    char *filter_opt = filter ? tu_strdup_printf("--filter=%s", filter) : NULL;
    char *log = tu_strdup_printf("%s/log", g_tmp);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(98);
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(97);
        /* Criterion's worker marker would make the program a worker. */
        unsetenv("BXFI_MAP");
        setenv("TMPDIR", dir, 1);
        setenv("HOME", dir, 1);
        setenv("SBX_TEST_BACKEND", "bubblewrap", 1);
        setenv("LD_LIBRARY_PATH", lib_path, 1);
        setenv("SBX_PLUGIN_PATH", plugin_path, 1);
        setenv("SBX_SUPERVISOR", supervisor, 1);
        setenv("SBX_PLUGIN_HOST", plugin_host, 1);
        unsetenv("CRITERION_OUTPUTS");
        execl(program, program_name, "-j1", filter_opt, (char *)NULL);
        _exit(96);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char tail[2048] = "";
    int fd = open(log, O_RDONLY);
    if (fd >= 0) {
        off_t end = lseek(fd, 0, SEEK_END);
        lseek(fd, end > (off_t)sizeof tail - 1 ? end - (off_t)sizeof tail + 1 : 0, SEEK_SET);
        ssize_t n = read(fd, tail, sizeof tail - 1);
        tail[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "%s as nobody: status %d; end of its output:\n%s", program_name, status, tail);
    cr_assert(strstr(tail, "Failing: 0 | Crashing: 0") != NULL, "%s", tail);
    if (ntests) {
        char *want = tu_strdup_printf("Tested: %d | Passing: %d |", ntests, ntests);
        cr_assert(strstr(tail, want) != NULL, "not %s: %s", want, tail);
        free(want);
    }
    tu_rmtree(dir);
    tu_rmtree(bin);
    free(dir);
    free(bin);
    free(lib_path);
    free(plugin_path);
    free(supervisor);
    free(plugin_host);
    free(program);
    free(filter_opt);
    free(log);
}

/* The whole conformance suite on bubblewrap as uid/gid 65534. */
Test(bubblewrap, conformance_as_nobody, .timeout = 600)
{
    if (getuid() != 0) {
        /* Already unprivileged: tests/bubblewrap.sh runs it as this user. */
        cr_assert(getuid() != 0);
        return;
    }
    run_as_nobody("test_conformance", NULL, 0);
}

/* The privilege tests above again, the library running as uid 65534. */
Test(bubblewrap, privileges_as_nobody, .timeout = 300)
{
    if (getuid() != 0) {
        /* Already unprivileged: this run is the one as nobody. */
        cr_assert(getuid() != 0);
        return;
    }
    run_as_nobody("test_bubblewrap",
                  "bubblewrap/@(command_has_no_capabilities_and_is_not_host_root"
                  "|mounts_namespaces_and_kernel_calls_fail_with_eperm"
                  "|host_tree_and_sysctls_are_unchanged|files_belong_to_the_sandbox_user"
                  "|mountinfo_names_no_host_path_of_the_root)", 5);
}
