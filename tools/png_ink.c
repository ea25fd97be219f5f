/* png_ink.c — test tool: how much of a PNG (a headless Chromium screenshot of kt report) is
 * drawn: prints "WIDTH HEIGHT INK_PIXELS INK_ROWS", where an ink pixel is one not near white
 * and an ink row a row holding one. Reads through libpng's simplified API. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: png_ink FILE.png\n");
        return 2;
    }
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&img, argv[1])) {
        fprintf(stderr, "png_ink: %s: %s\n", argv[1], img.message);
        return 1;
    }
    img.format = PNG_FORMAT_RGB;
    png_bytep px = malloc(PNG_IMAGE_SIZE(img));
    if (!px || !png_image_finish_read(&img, NULL, px, 0, NULL)) {
        fprintf(stderr, "png_ink: %s: %s\n", argv[1], px ? img.message : "out of memory");
        return 1;
    }
    unsigned long ink = 0, rows = 0;
    for (png_uint_32 y = 0; y < img.height; y++) {
        unsigned long in_row = 0;
        for (png_uint_32 x = 0; x < img.width; x++) {
            const png_byte *p = px + 3 * ((size_t)y * img.width + x);
            in_row += p[0] < 235 || p[1] < 235 || p[2] < 235;
        }
        ink += in_row;
        rows += in_row > 0;
    }
    printf("%u %u %lu %lu\n", img.width, img.height, ink, rows);
    free(px);
    return 0;
}
