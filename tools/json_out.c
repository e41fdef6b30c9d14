#include "json_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(json_out *j, FILE *f)
{
    memset(j, 0, sizeof *j);
    j->f = f;
}

/* Writes the comma that separates this value from the previous one. */
static void before_value(json_out *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    int d = j->depth < JSON_MAX_DEPTH ? j->depth : JSON_MAX_DEPTH;
    if (d > 0) {
        if (j->need_comma[d - 1])
            fputs(", ", j->f);
        j->need_comma[d - 1] = true;
    }
}

static void open_container(json_out *j, char c)
{
    before_value(j);
    fputc(c, j->f);
    if (j->depth < JSON_MAX_DEPTH)
        j->need_comma[j->depth] = false;
    j->depth++;
}

static void close_container(json_out *j, char c)
{
    fputc(c, j->f);
    if (j->depth > 0)
        j->depth--;
    if (j->depth == 0)
        fputc('\n', j->f);
}

void json_begin_object(json_out *j) { open_container(j, '{'); }
void json_end_object(json_out *j) { close_container(j, '}'); }
void json_begin_array(json_out *j) { open_container(j, '['); }
void json_end_array(json_out *j) { close_container(j, ']'); }

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static void write_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned char c = *s;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            s++;
        } else if (c == '\n' || c == '\t') {
            fputs(c == '\n' ? "\\n" : "\\t", f);
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            s++;
        } else {
            /* File names are bytes, not always UTF-8: a byte that does not
             * start a valid sequence becomes U+FFFD so the output stays
             * valid JSON. */
            size_t n = utf8_len(s);
            if (n == 0) {
                fputs("\\ufffd", f);
                s++;
            } else {
                fwrite(s, 1, n, f);
                s += n;
            }
        }
    }
    fputc('"', f);
}

void json_key(json_out *j, const char *key)
{
    before_value(j);
    write_string(j->f, key);
    fputs(": ", j->f);
    j->after_key = true;
}

void json_string(json_out *j, const char *s)
{
    before_value(j);
    if (s)
        write_string(j->f, s);
    else
        fputs("null", j->f);
}

void json_double(json_out *j, double v)
{
    before_value(j);
    if (isnan(v)) {
        fputs("\"nan\"", j->f);
    } else if (isinf(v)) {
        fputs(v > 0 ? "\"inf\"" : "\"-inf\"", j->f);
    } else {
        /* The shortest of 15 or 17 digits that reads back as the same
         * double: 0.1 rather than 0.10000000000000001. */
        char buf[40];
        snprintf(buf, sizeof buf, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, sizeof buf, "%.17g", v);
        fputs(buf, j->f);
    }
}

void json_int(json_out *j, int64_t v)
{
    before_value(j);
    fprintf(j->f, "%lld", (long long)v);
}

void json_bool(json_out *j, bool v)
{
    before_value(j);
    fputs(v ? "true" : "false", j->f);
}

void json_null(json_out *j)
{
    before_value(j);
    fputs("null", j->f);
}
