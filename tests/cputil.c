/*
 * tests/cputil.c — control-plane test helpers (tests/cputil.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <libpq-fe.h>

#include "cputil.h"

extern char **environ;

static char *
xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
xprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;

    va_start(ap, fmt);
    cr_assert(vasprintf(&s, fmt, ap) >= 0);
    va_end(ap);
    return s;
}

static char *
make_tmpdir(const char *prefix)
{
    const char *t = getenv("TMPDIR");
    char *p = xprintf("%s/%s.XXXXXX", t && *t ? t : "/tmp", prefix);

    cr_assert(mkdtemp(p), "mkdtemp %s: %s", p, strerror(errno));
    return p;
}

static void
rmtree(const char *path)
{
    char *cmd;

    if (!path)
        return;
    cmd = xprintf("rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "cputil: %s failed\n", cmd);
    free(cmd);
}

/* ---------------------------------------------------------------- stores */

int
cpu_store_is_pg(void)
{
    const char *u = getenv("SBX_TEST_CP_PG_URL");

    return u && *u;
}

static void
pg_admin(const char *admin_url, const char *sql)
{
    PGconn *c = PQconnectdb(admin_url);
    PGresult *r;

    cr_assert(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", admin_url,
              PQerrorMessage(c));
    r = PQexec(c, sql);
    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* @admin_url with its database path replaced by @db. */
static char *
url_with_db(const char *admin_url, const char *db)
{
    const char *scheme = strstr(admin_url, "://");
    const char *slash = scheme ? strchr(scheme + 3, '/') : NULL;
    const char *query = strchr(admin_url, '?');

    if (!slash)
        return xprintf("%s/%s%s", admin_url, db, query ? query : "");
    return xprintf("%.*s/%s%s", (int)(slash - admin_url), admin_url, db, query ? query : "");
}

cpu_store *
cpu_store_new(void)
{
    cpu_store *s = calloc(1, sizeof *s);

    if (cpu_store_is_pg()) {
        unsigned char r[6];
        char *sql;
        int fd = open("/dev/urandom", O_RDONLY);
        cr_assert(fd >= 0 && read(fd, r, sizeof r) == (ssize_t)sizeof r);
        close(fd);
        s->pg_admin = strdup(getenv("SBX_TEST_CP_PG_URL"));
        s->pg_name = xprintf("sbxtest_%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4],
                             r[5]);
        sql = xprintf("CREATE DATABASE %s", s->pg_name);
        pg_admin(s->pg_admin, sql);
        free(sql);
        s->url = url_with_db(s->pg_admin, s->pg_name);
    } else {
        s->dir = make_tmpdir("cputil-store");
        s->url = xprintf("%s/control-plane.db", s->dir);
    }
    return s;
}

void
cpu_store_free(cpu_store *s)
{
    if (!s)
        return;
    if (s->pg_name) {
        char *sql = xprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", s->pg_name);
        pg_admin(s->pg_admin, sql);
        free(sql);
    }
    rmtree(s->dir);
    free(s->dir);
    free(s->url);
    free(s->pg_admin);
    free(s->pg_name);
    free(s);
}

/* ---------------------------------------------------------------- servers */

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    n = (long)fread(buf, 1, (size_t)n, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

char *
cpu_read_log(const cpu_server *srv, int which_stderr)
{
    return slurp(which_stderr ? srv->err_path : srv->out_path);
}

static const char *
server_program(void)
{
    const char *p = getenv("SBX_SERVER");

    return p && *p ? p : SBX_BUILD_DIR "/server/sbx-server";
}

static char *last_stderr;

char *
cpu_last_stderr(void)
{
    return strdup(last_stderr ? last_stderr : "");
}

/* Forks and execs sbx-server as cpu_try_start() describes; does not wait. */
static cpu_server *
spawn_server(const cpu_store *store, const char *const *env)
{
    cpu_server *srv = calloc(1, sizeof *srv);
    char *state;

    cr_assert_not_null(srv);

    srv->dir = make_tmpdir("cputil-server");
    srv->out_path = xprintf("%s/stdout.log", srv->dir);
    srv->err_path = xprintf("%s/stderr.log", srv->dir);
    state = xprintf("%s/state", srv->dir);
    srv->pid = fork();
    cr_assert(srv->pid >= 0);
    if (srv->pid == 0) {
        int out = open(srv->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(srv->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0 || err < 0)
            _exit(126);
        dup2(out, 1);
        dup2(err, 2);
        /* A test process that dies (crash, timeout) takes its server with
         * it, so none is left running. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            _exit(125);
        setenv("BESPOKE_API_KEY_PEPPER", CPU_PEPPER, 1);
        setenv("BESPOKE_CONTROL_PLANE_ADMIN_TOKEN", CPU_ADMIN_TOKEN, 1);
        setenv("BESPOKE_CONTROL_PLANE_DB", store->url, 1);
        setenv("BESPOKE_ALLOWED_BACKENDS", "local", 1);
        setenv("HOST", "127.0.0.1", 1);
        setenv("PORT", "0", 1);
        setenv("XDG_STATE_HOME", state, 1);
        for (size_t i = 0; env && env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            char *k;
            if (!eq)
                continue;
            k = strndup(env[i], (size_t)(eq - env[i]));
            if (eq[1])
                setenv(k, eq + 1, 1);
            else
                unsetenv(k);
            free(k);
        }
        execl(server_program(), "sbx-server", (char *)NULL);
        _exit(127);
    }
    free(state);
    return srv;
}

/* Waits (10 s at most) for @srv's "listening on URL" line; NULL (with
 * *@status, @srv freed) when it exited first. */
static cpu_server *
wait_listening(cpu_server *srv, int *status)
{
    double deadline;
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline = (double)ts.tv_sec + ts.tv_nsec / 1e9 + 10.0;
    for (;;) {
        char *out = slurp(srv->out_path), *line = strstr(out, "listening on ");
        int st;
        if (line && strchr(line, '\n')) {
            char *nl = strchr(line, '\n');
            *nl = 0;
            srv->url = strdup(line + strlen("listening on "));
            free(out);
            return srv;
        }
        free(out);
        if (waitpid(srv->pid, &st, WNOHANG) == srv->pid) {
            if (status)
                *status = st;
            free(last_stderr);
            last_stderr = slurp(srv->err_path);
            srv->pid = 0;
            rmtree(srv->dir);
            free(srv->dir);
            free(srv->out_path);
            free(srv->err_path);
            free(srv);
            return NULL;
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((double)ts.tv_sec + ts.tv_nsec / 1e9 > deadline) {
            kill(srv->pid, SIGKILL);
            waitpid(srv->pid, &st, 0);
            cr_assert_fail("sbx-server did not print its address within 10 s");
        }
        usleep(2000);
    }
}

cpu_server *
cpu_try_start(const cpu_store *store, const char *const *env, int *status)
{
    return wait_listening(spawn_server(store, env), status);
}

void
cpu_start_many(const cpu_store *store, const char *const *env, size_t n, cpu_server **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = spawn_server(store, env);
    for (size_t i = 0; i < n; i++) {
        int st = 0;

        out[i] = wait_listening(out[i], &st);
        cr_assert(out[i], "server %zu of %zu exited before listening (wait status %d): %s", i,
                  n, st, last_stderr ? last_stderr : "");
    }
}

cpu_server *
cpu_start(const cpu_store *store, const char *const *env)
{
    int st = 0;
    cpu_server *srv = cpu_try_start(store, env, &st);

    cr_assert(srv, "sbx-server exited before listening (wait status %d)", st);
    return srv;
}

int
cpu_signal(cpu_server *srv, int sig)
{
    int st = 0;

    if (srv->pid <= 0)
        return -1;
    kill(srv->pid, sig);
    while (waitpid(srv->pid, &st, 0) < 0 && errno == EINTR)
        ;
    srv->pid = 0;
    return st;
}

/* The product keys cpu_bootstrap() made in this process: cpu_stop()
 * terminates what their organisations left running. */
static char *known_keys[64];
static size_t nknown;

/* Terminates every sandbox of the bootstrapped organisations that is not
 * destroyed yet, so no test leaves a (detached) sandbox behind. */
static void
terminate_leftovers(const cpu_server *srv)
{
    for (size_t k = 0; k < nknown; k++) {
        cpu_response *r = cpu_http(srv->url, "GET", "/v1/sandboxes", known_keys[k], NULL, NULL);
        size_t n = json_object_is_type(r->json, json_type_array)
                       ? json_object_array_length(r->json) : 0;
        for (size_t i = 0; i < n; i++) {
            json_object *sb = json_object_array_get_idx(r->json, i);
            const char *st = json_object_get_string(json_object_object_get(sb, "status"));
            const char *id = json_object_get_string(json_object_object_get(sb, "id"));
            char *p;
            cpu_response *d;
            if (!st || !id || !strcmp(st, "destroyed"))
                continue;
            p = xprintf("/v1/sandboxes/%s", id);
            d = cpu_http(srv->url, "DELETE", p, known_keys[k], NULL, NULL);
            cpu_response_free(d);
            free(p);
        }
        cpu_response_free(r);
    }
}

void
cpu_stop(cpu_server *srv)
{
    if (!srv)
        return;
    if (srv->pid > 0) {
        terminate_leftovers(srv);
        cpu_signal(srv, SIGTERM);
    }
    rmtree(srv->dir);
    free(srv->dir);
    free(srv->url);
    free(srv->out_path);
    free(srv->err_path);
    free(srv);
}

/* ---------------------------------------------------------------- HTTP */

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t
collect(char *data, size_t size, size_t n, void *user)
{
    buf *b = user;
    size_t k = size * n;

    b->p = realloc(b->p, b->n + k + 1);
    memcpy(b->p + b->n, data, k);
    b->n += k;
    b->p[b->n] = 0;
    return k;
}

cpu_response *
cpu_http(const char *url, const char *method, const char *path, const char *key,
         const char *const *headers, const char *body)
{
    static int inited;
    cpu_response *res = calloc(1, sizeof *res);
    CURL *c;
    struct curl_slist *h = NULL;
    buf b = { 0 }, hb = { 0 };
    char *full = xprintf("%s%s", url, path), *auth = NULL;

    if (!__atomic_exchange_n(&inited, 1, __ATOMIC_SEQ_CST))
        curl_global_init(CURL_GLOBAL_ALL);
    c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hb);
    if (key) {
        auth = xprintf("Authorization: Bearer %s", key);
        h = curl_slist_append(h, auth);
    }
    for (size_t i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    if (body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    }
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    free(full);
    free(auth);
    res->body = b.p ? b.p : strdup("");
    res->body_len = b.n;
    res->headers = hb.p ? hb.p : strdup("");
    if (res->body_len)
        res->json = json_tokener_parse(res->body);
    return res;
}

void
cpu_response_free(cpu_response *res)
{
    if (!res)
        return;
    free(res->body);
    free(res->headers);
    json_object_put(res->json);
    free(res);
}

char *
cpu_response_header(const cpu_response *res, const char *name)
{
    size_t n = strlen(name);
    const char *p = res->headers;

    while (p && *p) {
        const char *eol = strstr(p, "\r\n");
        if (!eol)
            eol = p + strlen(p);
        if ((size_t)(eol - p) > n && !strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            return strndup(v, (size_t)(eol - v));
        }
        p = *eol ? eol + 2 : eol;
    }
    return NULL;
}

json_object *
cpu_jget(json_object *root, const char *path)
{
    char *copy = strdup(path), *save = NULL;
    json_object *cur = root;

    for (char *t = strtok_r(copy, ".", &save); t && cur; t = strtok_r(NULL, ".", &save)) {
        if (json_object_is_type(cur, json_type_array)) {
            char *end;
            long i = strtol(t, &end, 10);
            cur = *end || i < 0 || (size_t)i >= json_object_array_length(cur)
                      ? NULL : json_object_array_get_idx(cur, (size_t)i);
        } else if (json_object_is_type(cur, json_type_object)) {
            json_object *next = NULL;
            cur = json_object_object_get_ex(cur, t, &next) ? next : NULL;
        } else {
            cur = NULL;
        }
    }
    free(copy);
    return cur;
}

const char *
cpu_jstr(const cpu_response *res, const char *path)
{
    json_object *v = cpu_jget(res->json, path);

    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

char *
cpu_bootstrap(const cpu_server *srv, const char *name, char **org_id)
{
    const char *hdr[] = { "X-Control-Plane-Admin: " CPU_ADMIN_TOKEN, NULL };
    char *body = xprintf("{\"name\":\"%s\"}", name), *key;
    cpu_response *r = cpu_http(srv->url, "POST", "/v1/organizations", NULL, hdr, body);

    free(body);
    cr_assert_eq(r->status, 201, "bootstrap: %ld %s", r->status, r->body);
    cr_assert(cpu_jstr(r, "api_key.secret"));
    key = strdup(cpu_jstr(r, "api_key.secret"));
    if (nknown < sizeof known_keys / sizeof known_keys[0])
        known_keys[nknown++] = strdup(key);
    if (org_id)
        *org_id = strdup(cpu_jstr(r, "organization.id"));
    cpu_response_free(r);
    return key;
}

char *
cpu_create_local(const cpu_server *srv, const char *key, const char *extra_json)
{
    json_object *body = extra_json ? json_tokener_parse(extra_json) : json_object_new_object();
    cpu_response *r;
    char *id;

    cr_assert(body);
    json_object_object_add(body, "backend", json_object_new_string("local"));
    r = cpu_http(srv->url, "POST", "/v1/sandboxes", key, NULL,
                 json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
    json_object_put(body);
    cr_assert_eq(r->status, 201, "create: %ld %s", r->status, r->body);
    id = strdup(cpu_jstr(r, "id"));
    cpu_response_free(r);
    return id;
}
