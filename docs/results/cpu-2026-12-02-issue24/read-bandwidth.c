/* read-bandwidth.c: how fast this machine reads memory with plain 256-bit loads, 1 or N threads (each thread a slice of 1 GiB), for the figures beside issue 24's CPU decode. Build: gcc -O3 -march=native -pthread read-bandwidth.c; run: ./a.out THREADS. (Its memcpy line is not used: the timer there is wrong.) */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N (256L<<20)
static float *buf; static int nt;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *run(void *a){ long id=(long)a; long n=N/nt; const float *p=buf+id*n; __m256 s0=_mm256_setzero_ps(),s1=s0,s2=s0,s3=s0;
 for(long i=0;i<n;i+=32){ s0=_mm256_add_ps(s0,_mm256_loadu_ps(p+i)); s1=_mm256_add_ps(s1,_mm256_loadu_ps(p+i+8)); s2=_mm256_add_ps(s2,_mm256_loadu_ps(p+i+16)); s3=_mm256_add_ps(s3,_mm256_loadu_ps(p+i+24));}
 float t[8]; _mm256_storeu_ps(t,_mm256_add_ps(_mm256_add_ps(s0,s1),_mm256_add_ps(s2,s3))); return (void*)(long)(t[0]>1e30);}
int main(int c,char**v){ nt=atoi(v[1]); buf=malloc(N*4); for(long i=0;i<N;i++) buf[i]=(float)(i&1023); pthread_t th[8];
 for(int r=0;r<5;r++){ double t0=now(); for(long i=0;i<nt;i++) pthread_create(&th[i],0,run,(void*)i); for(int i=0;i<nt;i++) pthread_join(th[i],0); double t=now()-t0; printf("%d threads read %.1f GB/s\n",nt,N*4/t/1e9);}
 float *b2=malloc(N*4); memset(b2,1,N*4); memcpy(b2,buf,N*4); double t0=now(); memcpy(b2,buf,N*4); double t=now()-t0; printf("memcpy r+w %.1f GB/s\n",2.0*N*4/t/1e9); return 0;}
