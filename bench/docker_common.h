/*
 * bench/docker_common.h — what the docker benchmarks share: timing and
 * percentiles, and the raw Engine API over libcurl (the baseline: the same
 * calls the library makes, made by hand with one reused curl handle).
 *
 * The Engine is DOCKER_HOST (unix:// only here) or /var/run/docker.sock; the
 * image is $SBX_DOCKER_IMAGE (default sbx-test/debian:bookworm, made by
 * scripts/docker-env up).
 */
#ifndef SBX_BENCH_DOCKER_COMMON_H
#define SBX_BENCH_DOCKER_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "bench.h"

static inline const char *bench_image(void)
{
    const char *i = getenv("SBX_DOCKER_IMAGE");
    return i && *i ? i : "sbx-test/debian:bookworm";
}

static inline const char *bench_socket(void)
{
    const char *h = getenv("DOCKER_HOST");
    if (h && strncmp(h, "unix://", 7) == 0)
        return h + 7;
    return "/var/run/docker.sock";
}

/* One request with handle @h (reused: keep-alive); returns the status and
 * stores the body in *@out (free()) when @out is not NULL. */
static inline long raw_call(CURL *h, const char *method, const char *path, const char *json,
                            char **out)
{
    char url[1024];
    snprintf(url, sizeof url, "http://localhost/v1.41%s", path);
    bench_body b = { 0 };
    struct curl_slist *hd = NULL;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, bench_socket());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (json) {
        hd = curl_slist_append(hd, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    if (out)
        *out = b.data;
    else
        free(b.data);
    return status;
}

/* The "Id" of a JSON answer (a new string), or NULL. */
static inline char *raw_id(const char *json)
{
    const char *p = json ? strstr(json, "\"Id\":\"") : NULL;
    if (!p)
        return NULL;
    p += 6;
    const char *e = strchr(p, '"');
    return e ? strndup(p, (size_t)(e - p)) : NULL;
}

/* exec of @cmd_json (a JSON array) in container @cid by hand: create, start
 * (the stream read to its end), inspect. Returns the exit code or -1. */
static inline int raw_exec(CURL *h, const char *cid, const char *cmd_json)
{
    char path[256], body[512], *ans = NULL;
    snprintf(path, sizeof path, "/containers/%s/exec", cid);
    snprintf(body, sizeof body, "{\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,"
                                "\"Cmd\":%s}", cmd_json);
    if (raw_call(h, "POST", path, body, &ans) != 201) {
        free(ans);
        return -1;
    }
    char *eid = raw_id(ans);
    free(ans);
    if (!eid)
        return -1;
    snprintf(path, sizeof path, "/exec/%s/start", eid);
    int code = -1;
    if (raw_call(h, "POST", path, "{\"Detach\":false,\"Tty\":false}", NULL) == 200) {
        snprintf(path, sizeof path, "/exec/%s/json", eid);
        if (raw_call(h, "GET", path, NULL, &ans) == 200) {
            const char *c = strstr(ans, "\"ExitCode\":");
            if (c && strncmp(c + 11, "null", 4) != 0)
                code = atoi(c + 11);
        }
        free(ans);
    }
    free(eid);
    return code;
}

#endif /* SBX_BENCH_DOCKER_COMMON_H */
