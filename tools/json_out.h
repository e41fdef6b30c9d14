/* A small JSON writer for the commands' --json output: one object on one
 * line, commas placed by the writer, strings escaped.
 *
 * Numbers that JSON cannot hold (inf, -inf, NaN) are written as the
 * strings "inf", "-inf" and "nan", which Python's float() reads back. */
#ifndef SEGRT_JSON_OUT_H
#define SEGRT_JSON_OUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_out {
    FILE *f;
    int depth;
    bool need_comma[JSON_MAX_DEPTH]; /* per open container: something was written in it */
    bool after_key;                  /* a key was written; its value comes next */
} json_out;

void json_init(json_out *j, FILE *f);

/* Containers. Nesting deeper than JSON_MAX_DEPTH is a bug in the caller. */
void json_begin_object(json_out *j);
void json_end_object(json_out *j); /* the outermost one ends the line */
void json_begin_array(json_out *j);
void json_end_array(json_out *j);

/* A key inside an object; the next value call writes its value. */
void json_key(json_out *j, const char *key);

void json_string(json_out *j, const char *s); /* NULL writes null */
void json_double(json_out *j, double v);      /* %.17g, or "inf"/"-inf"/"nan" */
void json_int(json_out *j, int64_t v);
void json_bool(json_out *j, bool v);
void json_null(json_out *j);

#endif
