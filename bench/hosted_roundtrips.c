/*
 * bench/hosted_roundtrips: the HTTP requests the hosted backends make, counted
 * where they arrive, at each provider's contract fake (tests/fakes/NAME.py,
 * started here on 127.0.0.1 with a dummy key and stopped by its PID), and
 * the latency of a warm exec against the provider's own exec endpoint.
 *
 * For each backend (daytona, e2b, tensorlake, blaxel, runloop, vercel,
 *   cloudflare, modal; -b picks one):
 *   - requests per create and per destroy (for modal: gRPC calls, to the
 *     control service and the command router): the fake's request log
 *     (GET /_fake/log) emptied before each call and read after it;
 *   - requests per warm exec: `echo hi` through execute_shell on a live
 *     sandbox that already ran one command, over -k execs;
 *   - modal only: the connections those execs opened (distinct client
 *     ports in the fake's log) over plain-text HTTP/2 (h2c, what the fake
 *     serves by default: libcurl 7.88.1 cannot re-use such a connection, so
 *     one per call) and over TLS (the fake's "GRPCS"/"ROUTERS" ports, as
 *     Modal is reached: connections re-used), and the p50 of a warm exec
 *     on each (-n rounds, alternating), with the ratio h2c/TLS;
 *   - every backend but modal: the p50 of that exec through libsbx against
 *     a raw libcurl request doing the provider round trip(s) a warm exec
 *     needs for the bare command (`echo hi`, no wrapper), one request
 *     where the provider's API allows it (raw_exec_for; one reused handle:
 *     keep-alive), the two alternating in one run (-n rounds), and the
 *     ratio library/raw: the target (<= 1.10, printed, not enforced) on
 *     e2b, whose plugin sends the command as that request carries it
 *     (/bin/bash -c), and on vercel, whose two-request exec is not sent
 *     raw as the plugin sends it; information on the backends below. The raw
 *     requests: daytona's POST /toolbox/ID/process/session/SID/exec
 *     {"command": "echo hi", "runAsync": false} in a session made first
 *     (then, for information, POST /toolbox/ID/process/execute, one shell
 *     with stdout and stderr merged, which the plugin cannot use); e2b's
 *     envd process.Process/Start Connect stream; tensorlake's SSE POST
 *     {sandbox_url}/api/v1/processes/run; cloudflare's SSE POST
 *     /v1/sandbox/ID/exec; blaxel's NDJSON POST {url}/process
 *     (waitForCompletion); runloop's POST /v1/devboxes/ID/execute (held
 *     to the end); vercel's two, as its API has no one-request exec: POST
 *     /v1/sandboxes/ID/cmd (wait: true, answered with the exit code) and
 *     GET of its logs.
 *   - daytona, tensorlake, blaxel, runloop and cloudflare: then the
 *     plugin's own exec request (its wrapper and env, read back from the
 *     fake's log) is sent raw too, the three alternating, splitting the
 *     library's time into the wrapper's in the sandbox (own request - bare
 *     command) and the client side's (library - own request): "split p50"
 *     (own_split). There the ratio library/own request is the target
 *     (<= 1.10): what the library adds to libcurl sending the same
 *     request by hand. The wrapper is what the provider's API asks of any
 *     client that keeps stdout and stderr apart and exact (text-only
 *     output channels, a session shell to stay out of), so a client of
 *     that API pays it with or without this library.
 *
 * The fakes are the tree's (SBX_FAKES_DIR overrides), the plugins the build
 * tree's (their directories go before SBX_PLUGIN_PATH); the plugin mode is
 * SBX_PLUGIN_MODE's (out of process by default). The fakes run real
 * sandboxes (bwrap), as root, as in the tests.
 *
 * Usage: hosted_roundtrips [-b BACKEND] [-n ROUNDS] [-k EXECS]
 *        (defaults: every backend, 100 rounds, 20 counted execs)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <sbx/sbx.h>

#include "bench.h"

#define FAKE_KEY "sbx-bench-dummy-key"

/* ------------------------------------------------------------ the fake */

typedef struct fake {
    pid_t pid;
    int port;
    int grpc_port;      /* modal: the gRPC control service's ("GRPC <n>") */
    int grpcs_port;     /* modal: the same over TLS ("GRPCS <n>") */
    int routers_port;   /* modal: the command router over TLS ("ROUTERS <n>") */
    CURL *ctl;          /* control requests (/_fake/...) */
} fake;

/* Starts tests/fakes/@backend.py; 0, or -1 after saying why. */
static int fake_start(const char *backend, fake *f)
{
    const char *dir = getenv("SBX_FAKES_DIR");
    char script[4096];
    snprintf(script, sizeof script, "%s/%s.py", dir && *dir ? dir : SBX_TOP_SRCDIR "/tests/fakes",
             backend);
    if (access(script, R_OK) != 0) {
        printf("(left out: no fake %s: %s)\n", script, strerror(errno));
        return -1;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(p[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        setenv("SBX_FAKE_API_KEY", FAKE_KEY, 1);
        unsetenv("SBX_FAKE_LOG");
        unsetenv("SBX_FAKE_FAULTS");
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        execlp("python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    f->pid = pid;
    f->port = 0;
    char line[256];
    size_t len = 0;
    double end = now_ms() + 10000;
    /* Up to its "PORT <n>" line (modal's fake prints "GRPC <n>" and
     * "ROUTER <n>" first). */
    while (len < sizeof line - 1) {
        line[len] = '\0';
        char *pl = strstr(line, "PORT ");
        if (pl && (pl == line || pl[-1] == '\n') && strchr(pl, '\n'))
            break;
        struct pollfd pf = { p[0], POLLIN, 0 };
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            break;
        ssize_t r = read(p[0], line + len, sizeof line - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(p[0]);
    line[len] = '\0';
    char *pl = strstr(line, "PORT "), *gl = strstr(line, "GRPC ");
    char *gs = strstr(line, "GRPCS "), *rs = strstr(line, "ROUTERS ");
    f->grpc_port = f->grpcs_port = f->routers_port = 0;
    if (gl)
        sscanf(gl, "GRPC %d", &f->grpc_port);
    if (gs)
        sscanf(gs, "GRPCS %d", &f->grpcs_port);
    if (rs)
        sscanf(rs, "ROUTERS %d", &f->routers_port);
    if (!pl || sscanf(pl, "PORT %d", &f->port) != 1) {
        printf("(left out: the %s fake did not start)\n", backend);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    f->ctl = curl_easy_init();
    return 0;
}

static void fake_stop(fake *f)
{
    if (f->ctl)
        curl_easy_cleanup(f->ctl);
    kill(f->pid, SIGTERM);
    waitpid(f->pid, NULL, 0);
}

/* A request to @url with @h (reused); the status, the body in @out (may be
 * NULL). @json: a POST body, or NULL. @auth: send the fake's key. */
static long http(CURL *h, const char *method, const char *url, const char *json, int auth,
                 bench_body *out)
{
    bench_body b = { 0 };
    struct curl_slist *hd = NULL;
    if (auth)
        hd = curl_slist_append(hd, "Authorization: Bearer " FAKE_KEY);
    if (json)
        hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    if (json)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST,
                     strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0 ? NULL : method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    if (out)
        *out = b;
    else
        free(b.data);
    return status;
}

static void log_clear(fake *f)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/log", f->port);
    http(f->ctl, "DELETE", url, NULL, 0, NULL);
}

/* How many requests the fake logged since log_clear (-1 on failure). */
static int log_count(fake *f)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/log", f->port);
    bench_body b;
    if (http(f->ctl, "GET", url, NULL, 0, &b) != 200) {
        free(b.data);
        return -1;
    }
    json_object *j = json_tokener_parse(b.data);
    free(b.data);
    int n = j && json_object_is_type(j, json_type_array) ? (int)json_object_array_length(j) : -1;
    json_object_put(j);
    return n;
}

/* modal: the distinct client addresses ("peer": one per connection) of
 * the calls logged since log_clear (-1 on failure); the calls in *@calls. */
static int log_peers(fake *f, int *calls)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/log", f->port);
    bench_body b;
    if (http(f->ctl, "GET", url, NULL, 0, &b) != 200) {
        free(b.data);
        return -1;
    }
    json_object *j = json_tokener_parse(b.data), *seen = json_object_new_object();
    free(b.data);
    int n = -1;
    *calls = 0;
    if (j && json_object_is_type(j, json_type_array)) {
        n = 0;
        for (size_t i = 0; i < json_object_array_length(j); i++) {
            json_object *e = json_object_array_get_idx(j, i), *p = NULL;
            if (!json_object_object_get_ex(e, "peer", &p))
                continue;
            (*calls)++;
            const char *peer = json_object_get_string(p);
            if (!json_object_object_get_ex(seen, peer, NULL)) {
                json_object_object_add(seen, peer, NULL);
                n++;
            }
        }
    }
    json_object_put(seen);
    json_object_put(j);
    return n;
}

/* ------------------------------------------------------------ raw exec */

/* The raw libcurl request that runs `echo hi` in a sandbox of the fake the
 * way the provider's API does it in one request (vercel: two): the
 * baseline of the warm exec. */
typedef struct raw_exec {
    const char *what;           /* for the report */
    char url[512];
    struct curl_slist *headers;
    char *body;
    size_t body_len;
    const char *expect;         /* a substring of a good answer */
    size_t expect_len;
    /* vercel: a second request, GET of this format with the command's id
     * (the first answer's "id") for its output; NULL: one request. */
    const char *then_get;
    const char *then_expect;
} raw_exec;

static void raw_exec_clear(raw_exec *x)
{
    curl_slist_free_all(x->headers);
    free(x->body);
    memset(x, 0, sizeof *x);
}

/* The envdAccessToken of e2b sandbox @id (a new string), from
 * POST /sandboxes/ID/connect on the fake at @port, or NULL (said). */
static char *e2b_envd_token(int port, const char *id)
{
    char url[256];
    bench_body b = { 0 };
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "X-API-Key: " FAKE_KEY);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandboxes/%s/connect", port, id);
    char *token = NULL;
    if (h && hd) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"timeout\": 600}");
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        if (curl_easy_perform(h) == CURLE_OK && b.data) {
            json_object *j = json_tokener_parse(b.data), *v;
            if (j && json_object_object_get_ex(j, "envdAccessToken", &v)
                && json_object_is_type(v, json_type_string))
                token = strdup(json_object_get_string(v));
            json_object_put(j);
        }
    }
    if (!token)
        fprintf(stderr, "e2b connect: no envdAccessToken: %.200s\n", b.data ? b.data : "no answer");
    free(b.data);
    curl_slist_free_all(hd);
    if (h)
        curl_easy_cleanup(h);
    return token;
}

/* The sandbox_url of tensorlake sandbox @id (a new string), from
 * GET /sandboxes/ID on the fake at @port, or NULL (said). */
static char *tensorlake_sandbox_url(int port, const char *id)
{
    char url[256];
    bench_body b = { 0 };
    CURL *h = curl_easy_init();
    snprintf(url, sizeof url, "http://127.0.0.1:%d/sandboxes/%s", port, id);
    char *su = NULL;
    if (h && http(h, "GET", url, NULL, 1, &b) == 200 && b.data) {
        json_object *j = json_tokener_parse(b.data), *v;
        if (j && json_object_object_get_ex(j, "sandbox_url", &v)
            && json_object_is_type(v, json_type_string))
            su = strdup(json_object_get_string(v));
        json_object_put(j);
    }
    if (!su)
        fprintf(stderr, "tensorlake get: no sandbox_url: %.200s\n", b.data ? b.data : "no answer");
    free(b.data);
    if (h)
        curl_easy_cleanup(h);
    return su;
}

/* tensorlake's run request on sandbox @id of the fake at @port, as the
 * plugin's warm exec sends it (POST {sandbox_url}/api/v1/processes/run,
 * Accept: text/event-stream, the body's fields), with the bare command
 * `bash -c "echo hi"` and no env: 0, or -1 (said). */
static int tensorlake_raw_exec(int port, const char *id, raw_exec *x)
{
    static const char tl_json[] = "{\"command\":\"bash\",\"args\":[\"-c\",\"echo hi\"],"
                                  "\"env\":{}}";
    char *su = tensorlake_sandbox_url(port, id);
    if (!su)
        return -1;
    x->what = "one SSE POST /api/v1/processes/run";
    snprintf(x->url, sizeof x->url, "%s/api/v1/processes/run", su);
    free(su);
    x->headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
    x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
    x->headers = curl_slist_append(x->headers, "Accept: text/event-stream");
    x->body = strdup(tl_json);
    x->body_len = strlen(tl_json);
    x->expect = "\"line\": \"hi\"";
    return 0;
}

/* The raw exec of `echo hi` for @backend's sandbox @id on the fake at
 * @port (one request, or vercel's two): 0, or -1 (modal: no baseline, its
 * exec being gRPC calls). */
static int raw_exec_for(const char *backend, int port, const char *id, raw_exec *x)
{
    static const char daytona_json[] = "{\"command\":\"echo hi\",\"runAsync\":false}";
    /* envd's Start: what the e2b plugin sends, as one Connect envelope. */
    static const char e2b_json[] = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-c\","
                                   "\"echo hi\"],\"envs\":{}},\"stdin\":false}";
    char h[256];
    memset(x, 0, sizeof *x);
    if (strcmp(backend, "daytona") == 0) {
        /* The command in a toolbox session of the sandbox (made here,
         * untimed), answered at the command's end with stdout and stderr
         * apart: the plugin's request with the bare command. */
        char url[512];
        CURL *ch = curl_easy_init();
        snprintf(url, sizeof url, "http://127.0.0.1:%d/toolbox/%s/process/session", port, id);
        long st = ch ? http(ch, "POST", url, "{\"sessionId\":\"sbx-bench-raw\"}", 1, NULL) : 0;
        if (ch)
            curl_easy_cleanup(ch);
        if (st != 201) {
            fprintf(stderr, "raw exec: POST /process/session: HTTP %ld\n", st);
            return -1;
        }
        x->what = "one POST /process/session/SID/exec";
        snprintf(x->url, sizeof x->url,
                 "http://127.0.0.1:%d/toolbox/%s/process/session/sbx-bench-raw/exec", port, id);
        x->headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        x->headers = curl_slist_append(x->headers, "X-Daytona-Split-Output: true");
        x->body = strdup(daytona_json);
        x->body_len = strlen(daytona_json);
        x->expect = "\"stdout\": \"hi\\n\", \"stderr\": \"\"";
    } else if (strcmp(backend, "e2b") == 0) {
        size_t n = strlen(e2b_json);
        x->what = "one Connect stream POST /process.Process/Start";
        snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d/process.Process/Start", port);
        /* The sandbox's envd token, as an SDK connecting to it gets it. */
        char *token = e2b_envd_token(port, id);
        if (!token)
            return -1;
        snprintf(h, sizeof h, "X-Access-Token: %s", token);
        free(token);
        x->headers = curl_slist_append(NULL, h);
        snprintf(h, sizeof h, "E2b-Sandbox-Id: %s", id);
        x->headers = curl_slist_append(x->headers, h);
        x->headers = curl_slist_append(x->headers, "E2b-Sandbox-Port: 49983");
        x->headers = curl_slist_append(x->headers, "Authorization: Basic dXNlcjo=");  /* user: */
        x->headers = curl_slist_append(x->headers, "Connect-Protocol-Version: 1");
        x->headers = curl_slist_append(x->headers, "Content-Type: application/connect+json");
        x->headers = curl_slist_append(x->headers, "Keepalive-Ping-Interval: 20");
        x->body = malloc(5 + n);
        if (x->body) {
            x->body[0] = 0;
            x->body[1] = (char)(n >> 24);
            x->body[2] = (char)(n >> 16);
            x->body[3] = (char)(n >> 8);
            x->body[4] = (char)n;
            memcpy(x->body + 5, e2b_json, n);
        }
        x->body_len = 5 + n;
        x->expect = "\"stdout\":\"aGkK\"";     /* base64 of "hi\n" */
    } else if (strcmp(backend, "tensorlake") == 0) {
        if (tensorlake_raw_exec(port, id, x) < 0)
            return -1;
    } else if (strcmp(backend, "cloudflare") == 0) {
        static const char cf_json[] = "{\"argv\":[\"bash\",\"-c\",\"echo hi\"]}";
        x->what = "one SSE POST /v1/sandbox/ID/exec";
        snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d/v1/sandbox/%s/exec", port, id);
        x->headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        x->body = strdup(cf_json);
        x->body_len = strlen(cf_json);
        x->expect = "data: aGkK";   /* base64 of "hi\n" */
    } else if (strcmp(backend, "runloop") == 0) {
        static const char rl_json[] = "{\"command\":\"echo hi\",\"optimistic_timeout\":25}";
        x->what = "one POST /v1/devboxes/ID/execute";
        snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d/v1/devboxes/%s/execute", port, id);
        x->headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        x->body = strdup(rl_json);
        x->body_len = strlen(rl_json);
        x->expect = "\"stdout\": \"hi\\n\"";
    } else if (strcmp(backend, "blaxel") == 0) {
        /* The sandbox's data plane (metadata.url, BL_RUN_URL's in the
         * fake): the process run to its end, its NDJSON stream. */
        static const char bl_json[] = "{\"command\":\"echo hi\",\"env\":{},"
                                      "\"waitForCompletion\":true,\"timeout\":0}";
        x->what = "one NDJSON POST {url}/process";
        snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d/run/sbx-test-ws/sandboxes/%s/process",
                 port, id);
        x->headers = curl_slist_append(NULL, "X-Blaxel-Authorization: Bearer " FAKE_KEY);
        x->headers = curl_slist_append(x->headers, "X-Blaxel-Workspace: sbx-test-ws");
        x->headers = curl_slist_append(x->headers, "Blaxel-Version: 2026-04-28");
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        x->headers = curl_slist_append(x->headers, "Accept: text/event-stream");
        x->body = strdup(bl_json);
        x->body_len = strlen(bl_json);
        x->expect = "\"type\": \"result\"";
    } else if (strcmp(backend, "vercel") == 0) {
        /* Its API has no one-request exec: the command run to its end
         * (wait: true, NDJSON ending with its exit code), then its logs. */
        static const char vc_json[] = "{\"command\":\"bash\",\"args\":[\"-c\",\"echo hi\"],"
                                      "\"wait\":true}";
        static char logs[512];
        x->what = "POST /v1/sandboxes/ID/cmd (wait) + GET its logs";
        snprintf(x->url, sizeof x->url, "http://127.0.0.1:%d/v1/sandboxes/%s/cmd?teamId=team_fake",
                 port, id);
        snprintf(logs, sizeof logs,
                 "http://127.0.0.1:%d/v1/sandboxes/%s/cmd/%%s/logs?teamId=team_fake", port, id);
        x->headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        x->body = strdup(vc_json);
        x->body_len = strlen(vc_json);
        x->expect = "\"exitCode\": 0";
        x->then_get = logs;
        x->then_expect = "\"data\": \"hi\\n\"";
    } else {
        return -1;
    }
    x->headers = curl_slist_append(x->headers, "Expect:");
    x->expect_len = strlen(x->expect);
    return x->body && x->headers ? 0 : -1;
}

/* Sends @x on @h: 0 when the answer is 200 and holds the expected output,
 * else -1 (said on stderr). */
static int raw_exec_run(CURL *h, const raw_exec *x)
{
    bench_body b = { 0 };
    curl_easy_setopt(h, CURLOPT_URL, x->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)x->body_len);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    int ok = status == 200 && b.data && memmem(b.data, b.len, x->expect, x->expect_len);
    if (ok && x->then_get) {
        /* The command's id: the first {"command": {"id": ...}} line's. */
        char *nl = memchr(b.data, '\n', b.len), url[640], id[128] = "";
        if (nl)
            *nl = '\0';
        json_object *j = json_tokener_parse(b.data), *c, *v;
        if (j && json_object_object_get_ex(j, "command", &c)
            && json_object_object_get_ex(c, "id", &v))
            snprintf(id, sizeof id, "%s", json_object_get_string(v));
        json_object_put(j);
        free(b.data);
        memset(&b, 0, sizeof b);
        snprintf(url, sizeof url, x->then_get, id);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        status = 0;
        if (*id && curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        ok = status == 200 && b.data && strstr(b.data, x->then_expect);
    }
    if (!ok)
        fprintf(stderr, "raw exec: HTTP %ld: %.200s\n", status, b.data ? b.data : "no answer");
    free(b.data);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ one backend */

static int exec_echo(sbx_sandbox *sb)
{
    sbx_error *err = NULL;
    sbx_result *r = sbx_sandbox_execute_shell(sb, "echo hi", &err);
    if (!r) {
        fprintf(stderr, "exec: %s\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        return -1;
    }
    size_t len;
    const char *out = sbx_result_get0_stdout(r, &len);
    int ok = len == 3 && memcmp(out, "hi\n", 3) == 0 && sbx_result_get_exit_code(r) == 0;
    sbx_result_free(r);
    if (!ok)
        fprintf(stderr, "exec: not \"hi\"\n");
    return ok ? 0 : -1;
}

/* The provider's variables, pointed at the fake (as tests/hosted.sh does). */
static void point_at(const char *backend, int port, int grpc_port)
{
    char url[128], api[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    if (strcmp(backend, "modal") == 0) {
        snprintf(api, sizeof api, "http://127.0.0.1:%d", grpc_port);
        setenv("MODAL_SERVER_URL", api, 1);
        setenv("MODAL_TOKEN_ID", "ak-sbx-bench", 1);
        setenv("MODAL_TOKEN_SECRET", FAKE_KEY, 1);
        setenv("MODAL_CONFIG_PATH", "/nonexistent/modal.toml", 1);
        unsetenv("MODAL_ENVIRONMENT");
        unsetenv("MODAL_PROFILE");
    } else if (strcmp(backend, "daytona") == 0) {
        snprintf(api, sizeof api, "%s/api", url);
        setenv("DAYTONA_API_URL", api, 1);
        setenv("DAYTONA_API_KEY", FAKE_KEY, 1);
        unsetenv("DAYTONA_JWT_TOKEN");
        unsetenv("DAYTONA_TARGET");
        unsetenv("DAYTONA_ORGANIZATION_ID");
    } else if (strcmp(backend, "e2b") == 0) {
        setenv("E2B_API_URL", url, 1);
        setenv("E2B_SANDBOX_URL", url, 1);
        setenv("E2B_API_KEY", FAKE_KEY, 1);
        unsetenv("E2B_DOMAIN");
        unsetenv("E2B_DEBUG");
        unsetenv("E2B_ACCESS_TOKEN");
    } else if (strcmp(backend, "vercel") == 0) {
        setenv("VERCEL_API_URL", url, 1);
        setenv("VERCEL_TOKEN", FAKE_KEY, 1);
        setenv("VERCEL_TEAM_ID", "team_fake", 1);
        setenv("VERCEL_PROJECT_ID", "prj_fake", 1);
        unsetenv("VERCEL_OIDC_TOKEN");
    } else if (strcmp(backend, "blaxel") == 0) {
        snprintf(api, sizeof api, "%s/v0", url);
        setenv("BL_API_URL", api, 1);
        snprintf(api, sizeof api, "%s/run", url);
        setenv("BL_RUN_URL", api, 1);
        setenv("BL_API_KEY", FAKE_KEY, 1);
        setenv("BL_WORKSPACE", "sbx-test-ws", 1);
        unsetenv("BL_REGION");
    } else if (strcmp(backend, "runloop") == 0) {
        setenv("RUNLOOP_BASE_URL", url, 1);
        setenv("RUNLOOP_API_KEY", FAKE_KEY, 1);
    } else if (strcmp(backend, "cloudflare") == 0) {
        setenv("CLOUDFLARE_SANDBOX_WORKER_URL", url, 1);
        setenv("CLOUDFLARE_SANDBOX_API_KEY", FAKE_KEY, 1);
    } else {
        setenv("TENSORLAKE_API_URL", url, 1);
        setenv("TENSORLAKE_API_KEY", FAKE_KEY, 1);
        unsetenv("TENSORLAKE_SANDBOX_PROXY_URL");
    }
}

#define CREATES 3

/* modal: connections per exec and the warm exec's p50 over h2c (@sb of
 * @c, the fake's plain-text ports) and over TLS (a second client and
 * sandbox on the fake's TLS ports, trusting its certificate). 0, or -1. */
static int modal_connections(fake *f, sbx_client *c, sbx_sandbox *sb, int rounds, int execs)
{
    (void)c;
    if (!f->grpcs_port || !f->routers_port) {
        printf("connections: (left out: the fake has no TLS ports)\n");
        return 0;
    }
    int rc = -1, calls = 0;
    char url[128], cfg[512], ca[] = "/tmp/sbx-bench-modal-ca-XXXXXX";
    sbx_client *tc = NULL;
    sbx_sandbox *tsb = NULL;
    sbx_error *err = NULL;
    double *h2c = calloc((size_t)rounds, sizeof *h2c), *tls = calloc((size_t)rounds, sizeof *tls);
    int fd = mkstemp(ca);
    bench_body b = { 0 };
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/tls_ca", f->port);
    if (fd < 0 || !h2c || !tls || http(f->ctl, "GET", url, NULL, 0, &b) != 200
        || write(fd, b.data, strlen(b.data)) != (ssize_t)strlen(b.data)) {
        fprintf(stderr, "modal: cannot get the fake's certificate\n");
        goto out;
    }
    log_clear(f);
    for (int i = 0; i < execs; i++)
        if (exec_echo(sb) < 0)
            goto out;
    int p1 = log_peers(f, &calls);
    printf("connections: h2c %d for %d calls of %d execs (%.2f per exec)\n", p1, calls, execs,
           (double)p1 / execs);
    snprintf(cfg, sizeof cfg, "{\"server_url\":\"https://127.0.0.1:%d\",\"ca_file\":\"%s\"}",
             f->grpcs_port, ca);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/router_url", f->port);
    char rurl[96];
    snprintf(rurl, sizeof rurl, "{\"url\":\"https://127.0.0.1:%d\"}", f->routers_port);
    if (http(f->ctl, "POST", url, rurl, 0, NULL) != 204
        || !(tc = sbx_client_new_with_config("modal", SBX_PLUGIN_MODE_DEFAULT, cfg, &err))
        || !(tsb = sbx_sandbox_create(tc, NULL, &err)) || exec_echo(tsb) < 0) {
        fprintf(stderr, "modal over TLS: %s\n", err ? sbx_error_get0_message(err) : "exec");
        goto out;
    }
    log_clear(f);
    for (int i = 0; i < execs; i++)
        if (exec_echo(tsb) < 0)
            goto out;
    int p2 = log_peers(f, &calls);
    printf("connections: TLS %d for %d calls of %d execs (%.2f per exec)\n", p2, calls, execs,
           (double)p2 / execs);
    for (int i = 0; i < rounds; i++) {
        double t0 = now_ms();
        if (exec_echo(sb) < 0)
            goto out;
        h2c[i] = now_ms() - t0;
        t0 = now_ms();
        if (exec_echo(tsb) < 0)
            goto out;
        tls[i] = now_ms() - t0;
    }
    double a = median(h2c, rounds), t = median(tls, rounds);
    printf("exec p50:    h2c (a connection per call) %.2f ms, TLS (re-used) %.2f ms, %d rounds\n",
           a, t, rounds);
    printf("ratio:       h2c/TLS %.2f\n", a / t);
    rc = 0;
out:
    if (f->ctl) {
        snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/router_url", f->port);
        http(f->ctl, "POST", url, "{\"url\":\"\"}", 0, NULL);
    }
    if (tsb) {
        sbx_sandbox_destroy(tsb, NULL);
        sbx_sandbox_free(tsb);
    }
    sbx_client_free(tc);
    sbx_error_free(err);
    free(b.data);
    free(h2c);
    free(tls);
    if (fd >= 0) {
        close(fd);
        unlink(ca);
    }
    return rc;
}

/* The backends whose warm exec is one request of a JSON body: the path
 * it goes to, a member to drop before sending it again, and what its
 * answer to `echo hi` holds. */
static const struct {
    const char *backend, *path, *drop, *expect;
} owned[] = {
    { "daytona", "/exec", NULL, "\"stdout\": \"hi\\n\"" },
    { "tensorlake", "/api/v1/processes/run", NULL, "SBX-OUT-" },
    { "blaxel", "/process", "name", "SBX-OUT-" },
    { "runloop", "/execute", "command_id", "SBX-OUT-" },
    { "cloudflare", "/exec", NULL, "data: aGkK" },
};

/* Whether @backend's warm exec is one request own_split() sends raw. */
static int has_own_request(const char *backend)
{
    for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++)
        if (strcmp(owned[k].backend, backend) == 0)
            return 1;
    return 0;
}

/* Where the warm exec's time goes, on the backends whose warm exec is one
 * request of a JSON body (daytona, tensorlake, blaxel, runloop,
 * cloudflare): the request the plugin sent for `echo hi` (its wrapper
 * script and env, read back from the fake's log; for runloop without its
 * command_id, which would answer the first execution again, for blaxel
 * without the process's name, which is taken) is sent raw too, on @rx's
 * address and headers, the three alternating for @rounds: library - own
 * request is what the client side adds (plugin host, JSON and streams,
 * output), own request - bare command what the wrapper costs in the
 * sandbox. 0 also when the backend has no such request. */
static int own_split(const char *backend, fake *f, sbx_sandbox *sb, const raw_exec *rx,
                     int rounds)
{
    size_t k;
    for (k = 0; k < sizeof owned / sizeof owned[0] && strcmp(owned[k].backend, backend) != 0; k++)
        ;
    if (k == sizeof owned / sizeof owned[0])
        return 0;
    char url[128];
    bench_body b = { 0 };
    raw_exec y = { .what = "the plugin's own request" };
    snprintf(url, sizeof url, "http://127.0.0.1:%d/_fake/log", f->port);
    log_clear(f);
    json_object *log = NULL;
    if (exec_echo(sb) == 0 && http(f->ctl, "GET", url, NULL, 0, &b) == 200 && b.data)
        log = json_tokener_parse(b.data);
    free(b.data);
    for (size_t i = 0; log && json_object_is_type(log, json_type_array)
                       && i < json_object_array_length(log) && !y.body; i++) {
        json_object *e = json_object_array_get_idx(log, i), *path, *body;
        const char *ps = json_object_object_get_ex(e, "path", &path)
                         ? json_object_get_string(path) : "";
        size_t pl = strlen(ps), ol = strlen(owned[k].path);
        if (pl >= ol && strcmp(ps + pl - ol, owned[k].path) == 0
            && json_object_object_get_ex(e, "body", &body)) {
            json_object *j = json_tokener_parse(json_object_get_string(body));
            if (j && owned[k].drop)
                json_object_object_del(j, owned[k].drop);
            if (j)
                y.body = strdup(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
            json_object_put(j);
        }
    }
    json_object_put(log);
    if (!y.body) {
        fprintf(stderr, "%s: the plugin's exec request is not in the fake's log\n", backend);
        return -1;
    }
    y.body_len = strlen(y.body);
    memcpy(y.url, rx->url, sizeof y.url);
    for (const struct curl_slist *h = rx->headers; h; h = h->next)
        y.headers = curl_slist_append(y.headers, h->data);
    y.expect = owned[k].expect;
    y.expect_len = strlen(y.expect);
    double *lib = calloc((size_t)rounds, sizeof *lib), *own = calloc((size_t)rounds, sizeof *own);
    double *bare = calloc((size_t)rounds, sizeof *bare);
    CURL *h = curl_easy_init();
    int rc = lib && own && bare && h && y.headers && raw_exec_run(h, &y) == 0 ? 0 : -1;
    for (int i = 0; i < rounds && rc == 0; i++) {
        double t0 = now_ms();
        rc = exec_echo(sb);
        lib[i] = now_ms() - t0;
        t0 = now_ms();
        rc = rc ? rc : raw_exec_run(h, &y);
        own[i] = now_ms() - t0;
        t0 = now_ms();
        rc = rc ? rc : raw_exec_run(h, rx);
        bare[i] = now_ms() - t0;
    }
    if (rc == 0) {
        double l = median(lib, rounds), o = median(own, rounds), r = median(bare, rounds);
        printf("split p50:  library %.2f ms, %s sent raw %.2f ms, the bare command %.2f ms, "
               "%d rounds\n", l, y.what, o, r, rounds);
        printf("            the wrapper in the sandbox %.2f ms, the client side %.2f ms\n",
               o - r, l - o);
        printf("ratio:      library/own request %.2f (the library's overhead: libcurl sending "
               "the plugin's request by hand, target <= 1.10)%s\n", l / o,
               l / o <= 1.10 ? "" : "  ABOVE TARGET");
    }
    if (h)
        curl_easy_cleanup(h);
    raw_exec_clear(&y);
    free(lib);
    free(own);
    free(bare);
    return rc;
}

/* daytona only: the same warm exec through libsbx against the provider's
 * one-request exec that merges stdout and stderr (POST .../process/execute
 * {"command": "echo hi"}: one shell, no session), which the plugin cannot
 * use; alternating for @rounds, printed beside the target's ratio. */
static int daytona_vs_execute(int port, sbx_sandbox *sb, int rounds)
{
    raw_exec x = { .what = "one POST /process/execute" };
    snprintf(x.url, sizeof x.url, "http://127.0.0.1:%d/toolbox/%s/process/execute", port,
             sbx_sandbox_get0_id(sb));
    x.headers = curl_slist_append(NULL, "Authorization: Bearer " FAKE_KEY);
    x.headers = curl_slist_append(x.headers, "Content-Type: application/json");
    x.headers = curl_slist_append(x.headers, "Expect:");
    x.body = strdup("{\"command\":\"echo hi\"}");
    x.body_len = x.body ? strlen(x.body) : 0;
    x.expect = "\"result\": \"hi\\n\"";
    x.expect_len = strlen(x.expect);
    double *lib = calloc((size_t)rounds, sizeof *lib), *rw = calloc((size_t)rounds, sizeof *rw);
    CURL *h = curl_easy_init();
    int rc = lib && rw && h && x.body && raw_exec_run(h, &x) == 0 ? 0 : -1;
    for (int i = 0; i < rounds && rc == 0; i++) {
        double t0 = now_ms();
        if (exec_echo(sb) < 0) {
            rc = -1;
            break;
        }
        lib[i] = now_ms() - t0;
        t0 = now_ms();
        if (raw_exec_run(h, &x) < 0) {
            rc = -1;
            break;
        }
        rw[i] = now_ms() - t0;
    }
    if (rc == 0) {
        double l = median(lib, rounds), r = median(rw, rounds);
        printf("exec p50:   library %.2f ms, raw %.2f ms (%s: stdout and stderr merged, "
               "no session), %d rounds\n", l, r, x.what, rounds);
        printf("ratio:      library/process-execute %.2f (information)\n", l / r);
    }
    if (h)
        curl_easy_cleanup(h);
    raw_exec_clear(&x);
    free(lib);
    free(rw);
    return rc;
}

static int run_backend(const char *backend, int rounds, int execs)
{
    fake f;
    if (fake_start(backend, &f) < 0)
        return 0;       /* left out, said so */
    point_at(backend, f.port, f.grpc_port);
    const char *mode = getenv("SBX_PLUGIN_MODE");
    printf("fake on 127.0.0.1:%d, plugin mode %s\n", f.port,
           mode && *mode ? mode : "default (out of process)");
    int status = 1;
    sbx_error *err = NULL;
    sbx_sandbox *sb[CREATES] = { 0 };
    CURL *raw = NULL;
    double *lib = calloc((size_t)rounds, sizeof *lib), *rw = calloc((size_t)rounds, sizeof *rw);
    sbx_client *c = sbx_client_new(backend, &err);
    if (!c) {
        printf("(left out: %s)\n", sbx_error_get0_message(err));
        sbx_error_free(err);
        status = 0;
        goto out;
    }
    int creq[CREATES];
    for (int i = 0; i < CREATES; i++) {
        log_clear(&f);
        if (!(sb[i] = sbx_sandbox_create(c, NULL, &err))) {
            fprintf(stderr, "%s: create: %s\n", backend, sbx_error_get0_message(err));
            goto out;
        }
        creq[i] = log_count(&f);
    }
    printf("create:     %d requests per create (%d creates:", creq[0], CREATES);
    for (int i = 0; i < CREATES; i++)
        printf(" %d", creq[i]);
    printf(")\n");

    /* Warm: the sandbox has run a command. */
    if (exec_echo(sb[0]) < 0)
        goto out;
    log_clear(&f);
    for (int i = 0; i < execs; i++)
        if (exec_echo(sb[0]) < 0)
            goto out;
    int ereq = log_count(&f);
    printf("warm exec:  %.2f requests per exec (%d requests over %d execs of `echo hi`)\n",
           (double)ereq / execs, ereq, execs);

    if (strcmp(backend, "modal") == 0 && modal_connections(&f, c, sb[0], rounds, execs) < 0)
        goto out;

    raw_exec rx;
    if (raw_exec_for(backend, f.port, sbx_sandbox_get0_id(sb[0]), &rx) == 0) {
        raw = curl_easy_init();
        if (!raw || raw_exec_run(raw, &rx) < 0) {
            raw_exec_clear(&rx);
            goto out;
        }
        for (int i = 0; i < rounds; i++) {
            double t0 = now_ms();
            if (exec_echo(sb[0]) < 0) {
                raw_exec_clear(&rx);
                goto out;
            }
            lib[i] = now_ms() - t0;
            t0 = now_ms();
            if (raw_exec_run(raw, &rx) < 0) {
                raw_exec_clear(&rx);
                goto out;
            }
            rw[i] = now_ms() - t0;
        }
        double l = median(lib, rounds), r = median(rw, rounds);
        printf("exec p50:   library %.2f ms, raw %.2f ms (%s, reused handle), %d rounds\n", l,
               r, rx.what, rounds);
        if (has_own_request(backend))
            printf("ratio:      library/bare command %.2f (information: the sandbox also runs "
                   "the wrapper the provider's API needs, split below)\n", l / r);
        else
            printf("ratio:      library/raw %.2f (target <= 1.10)%s\n", l / r,
                   l / r <= 1.10 ? "" : "  ABOVE TARGET");
        if (own_split(backend, &f, sb[0], &rx, rounds) < 0) {
            raw_exec_clear(&rx);
            goto out;
        }
        raw_exec_clear(&rx);
        if (strcmp(backend, "daytona") == 0
            && daytona_vs_execute(f.port, sb[0], rounds) < 0)
            goto out;
    } else {
        printf("exec p50:   (no raw baseline for %s)\n", backend);
    }

    int dreq = -1;
    for (int i = 0; i < CREATES; i++) {
        log_clear(&f);
        if (sbx_sandbox_destroy(sb[i], &err) < 0) {
            fprintf(stderr, "%s: destroy: %s\n", backend, sbx_error_get0_message(err));
            goto out;
        }
        int n = log_count(&f);
        if (dreq < 0 || n > dreq)
            dreq = n;
        sbx_sandbox_free(sb[i]);
        sb[i] = NULL;
    }
    printf("destroy:    %d requests per destroy (the most of %d)\n", dreq, CREATES);
    status = 0;
out:
    sbx_error_free(err);
    for (int i = 0; i < CREATES; i++)
        if (sb[i]) {
            sbx_sandbox_destroy(sb[i], NULL);
            sbx_sandbox_free(sb[i]);
        }
    sbx_client_free(c);
    if (raw)
        curl_easy_cleanup(raw);
    free(lib);
    free(rw);
    fake_stop(&f);
    return status;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int rounds = 100, execs = 20, opt;
    while ((opt = getopt(argc, argv, "b:n:k:")) != -1) {
        if (opt == 'b')
            only = optarg;
        else if (opt == 'n')
            rounds = atoi(optarg);
        else if (opt == 'k')
            execs = atoi(optarg);
        else {
            fprintf(stderr, "usage: hosted_roundtrips [-b BACKEND] [-n ROUNDS] [-k EXECS]\n");
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    if (execs < 1)
        execs = 1;
    static const char *const all[] = { "daytona", "e2b", "tensorlake", "blaxel", "runloop",
                                       "vercel", "cloudflare", "modal" };
    size_t nall = sizeof all / sizeof all[0], k;
    for (k = 0; only && k < nall && strcmp(only, all[k]) != 0; k++)
        ;
    if (only && k == nall) {
        fprintf(stderr, "hosted_roundtrips: unknown backend \"%s\" (daytona, e2b, tensorlake, "
                "blaxel, runloop, vercel, cloudflare, modal)\n", only);
        return 2;
    }
    /* The build tree's hosted plugins first. */
    const char *pp = getenv("SBX_PLUGIN_PATH");
    char *path = NULL;
    if (asprintf(&path, "%s/plugins/cloud/daytona/.libs:%s/plugins/cloud/e2b/.libs:"
                 "%s/plugins/cloud/tensorlake/.libs:%s/plugins/cloud/blaxel/.libs:"
                 "%s/plugins/cloud/runloop/.libs:%s/plugins/cloud/vercel/.libs:"
                 "%s/plugins/cloud/cloudflare/.libs:%s/plugins/cloud/modal/.libs%s%s",
                 SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR,
                 SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR, SBX_TOP_BUILDDIR,
                 pp && *pp ? ":" : "",
                 pp && *pp ? pp : "") < 0)
        return 1;
    setenv("SBX_PLUGIN_PATH", path, 1);
    free(path);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int status = 0;
    for (size_t i = 0; i < nall; i++) {
        if (only && strcmp(only, all[i]) != 0)
            continue;
        printf("-- %s\n", all[i]);
        fflush(stdout);
        if (run_backend(all[i], rounds, execs) != 0)
            status = 1;
        fflush(stdout);
    }
    curl_global_cleanup();
    return status;
}
