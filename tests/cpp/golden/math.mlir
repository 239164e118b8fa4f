// aten::hypot
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>) {
    %2 = "stablehlo.abs"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.abs"(%1) : (tensor<4xf32>) -> tensor<4xf32>
    %4 = "stablehlo.compare"(%2, %3) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %5 = "stablehlo.select"(%4, %2, %3) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %6 = "stablehlo.select"(%4, %3, %2) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %7 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %8 = "stablehlo.broadcast_in_dim"(%7) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %9 = "stablehlo.constant"() {value = dense<1.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %10 = "stablehlo.broadcast_in_dim"(%9) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %11 = "stablehlo.compare"(%5, %8) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %12 = "stablehlo.select"(%11, %10, %5) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %13 = "stablehlo.divide"(%6, %12) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %14 = "stablehlo.multiply"(%13, %13) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %15 = "stablehlo.add"(%10, %14) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %16 = "stablehlo.sqrt"(%15) : (tensor<4xf32>) -> tensor<4xf32>
    %17 = "stablehlo.multiply"(%5, %16) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %18 = "stablehlo.add"(%2, %3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %19 = "stablehlo.compare"(%3, %3) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %20 = "stablehlo.compare"(%2, %2) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %21 = "stablehlo.or"(%20, %19) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %22 = "stablehlo.select"(%21, %18, %17) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %23 = "stablehlo.constant"() {value = dense<0x7F800000> : tensor<f32>} : () -> tensor<f32>
    %24 = "stablehlo.broadcast_in_dim"(%23) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %25 = "stablehlo.compare"(%3, %24) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %26 = "stablehlo.compare"(%2, %24) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %27 = "stablehlo.or"(%26, %25) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
    %28 = "stablehlo.select"(%27, %24, %22) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%28) : (tensor<4xf32>) -> ()
  }
}
// aten::copysign.Tensor
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>) {
    %2 = "stablehlo.abs"(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.bitcast_convert"(%2) : (tensor<4xf32>) -> tensor<4xui32>
    %4 = "stablehlo.constant"() {value = dense<-2147483648> : tensor<i32>} : () -> tensor<i32>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<i32>) -> tensor<4xi32>
    %6 = "stablehlo.bitcast_convert"(%5) : (tensor<4xi32>) -> tensor<4xui32>
    %7 = "stablehlo.bitcast_convert"(%1) : (tensor<4xf32>) -> tensor<4xui32>
    %8 = "stablehlo.and"(%7, %6) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %9 = "stablehlo.or"(%3, %8) : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>
    %10 = "stablehlo.bitcast_convert"(%9) : (tensor<4xui32>) -> tensor<4xf32>
    "func.return"(%10) : (tensor<4xf32>) -> ()
  }
}
